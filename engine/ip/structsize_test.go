// The root package's structs stay small: no struct type in its non-test files has more than maxStructFields fields.

package ip

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unsafe"
)

// maxStructFields is how many fields a struct of the package may have: a
// type that needs more mixes concerns, each of which wants a type of its
// own saying what its lock guards.
const maxStructFields = 15

// TestStructSize parses the package's non-test files and fails, naming
// each, on any struct type (named, local or anonymous) with more than
// maxStructFields fields; a line declaring several names counts each.
func TestStructSize(t *testing.T) {
	big, err := bigStructs(".", maxStructFields)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range big {
		t.Errorf("%s: more than %d fields: split it by concern", b, maxStructFields)
	}
}

// bigStructs lists the struct types in dir's non-test Go files with more
// than limit fields, as "file:line name (n fields)", sorted.
func bigStructs(dir string, limit int) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var big []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		big = append(big, bigStructsIn(fset, f, limit)...)
	}
	sort.Strings(big)
	return big, nil
}

// bigStructsIn lists the struct types of f with more than limit fields.
func bigStructsIn(fset *token.FileSet, f *ast.File, limit int) []string {
	var big []string
	named := map[*ast.StructType]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeSpec:
			if st, ok := n.Type.(*ast.StructType); ok {
				named[st] = n.Name.Name
			}
		case *ast.StructType:
			if c := fieldCount(n); c > limit {
				name, ok := named[n]
				if !ok {
					name = "anonymous struct"
				}
				pos := fset.Position(n.Pos())
				big = append(big, fmt.Sprintf("%s:%d %s (%d fields)", filepath.Base(pos.Filename), pos.Line, name, c))
			}
		}
		return true
	})
	return big
}

// fieldCount counts a struct's fields: each name of a multi-name line,
// and an embedded field as one.
func fieldCount(st *ast.StructType) int {
	n := 0
	for _, f := range st.Fields.List {
		n += max(len(f.Names), 1)
	}
	return n
}

// TestDetachedRecordSize keeps what the engine holds of a detached pair
// for its life (its record, follower included) within 224 bytes: with
// 100,000 idle pairs spliced, every word costs the process 800 KB.
func TestDetachedRecordSize(t *testing.T) {
	if n := unsafe.Sizeof(detached{}); n > 224 {
		t.Errorf("a detached pair's record takes %d bytes: want at most 224", n)
	}
}
