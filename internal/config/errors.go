// Error and Errors: configuration problems located by file, line and key path.

package config

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Error is one problem in a configuration file.
type Error struct {
	File   string // as given to Parse or Load
	Line   int    // 1-based; 0 when unknown
	Column int    // 1-based; 0 when unknown
	Path   string // key path like listeners[1].upstream[0]; empty for syntax errors
	Msg    string
}

// Error formats e as FILE:LINE:COL: PATH: MSG, leaving out the parts that are
// unknown so editors and grep can still jump to the line.
func (e Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
		if e.Column > 0 {
			b.WriteString(":" + strconv.Itoa(e.Column))
		}
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in a configuration, ordered by position.
// Parse and Load return it so that a user fixes all mistakes in one pass.
type Errors []Error

// Error joins the errors one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// errorList collects errors while decoding and validating one file.
type errorList struct {
	file string
	errs Errors
	// undecoded holds the paths of values that could not be decoded, so that
	// validation does not report them, or anything inside them, again.
	undecoded map[string]bool
}

func newErrorList(file string) *errorList {
	return &errorList{file: file, undecoded: map[string]bool{}}
}

// add records an error unless path lies in a value that could not be decoded.
func (l *errorList) add(line, col int, path, format string, args ...any) {
	for p := path; ; p = parentPath(p) {
		if l.undecoded[p] {
			return
		}
		if p == "" {
			break
		}
	}
	l.errs = append(l.errs, Error{File: l.file, Line: line, Column: col, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// atNode records an error at n's position.
func (l *errorList) atNode(n *yaml.Node, path, format string, args ...any) {
	l.add(n.Line, n.Column, path, format, args...)
}

// undecodable records an error in the value n at path and marks path so that
// later errors about it or inside it are dropped as consequences.
func (l *errorList) undecodable(n *yaml.Node, path, format string, args ...any) {
	l.atNode(n, path, format, args...)
	l.undecoded[path] = true
}

// sorted returns the errors ordered by line and column; the sort is stable so
// that errors at one position keep the order they were found in.
func (l *errorList) sorted() Errors {
	es := slices.Clone(l.errs)
	slices.SortStableFunc(es, func(a, b Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	return es
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parserProblems are the messages yaml.v3 raises from its parser (as opposed
// to its scanner). For these it reports a 0-based line, and no line at all
// for the first one, so syntaxError adds one.
var parserProblems = []string{
	"did not find expected ',' or ']'",
	"did not find expected ',' or '}'",
	"did not find expected '-' indicator",
	"did not find expected <document start>",
	"did not find expected <stream-start>",
	"did not find expected key",
	"did not find expected node content",
	"found duplicate %TAG directive",
	"found duplicate %YAML directive",
	"found incompatible YAML document",
	"found undefined tag handle",
}

// syntaxError turns a yaml.v3 parse error into an Error with the right line.
func syntaxError(file string, data []byte, err error) Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if slices.Contains(parserProblems, msg) {
		line++
	}
	if line == 0 {
		line = locateLineless(msg, data)
	}
	return Error{File: file, Line: line, Msg: "invalid YAML: " + msg}
}

var unknownAnchorRE = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

// locateLineless finds the line of the errors yaml.v3 reports without one:
// an alias to an undefined anchor, or a byte YAML refuses to read. It
// returns 0 if it cannot tell.
func locateLineless(msg string, data []byte) int {
	if m := unknownAnchorRE.FindStringSubmatch(msg); m != nil {
		if i := bytes.Index(data, []byte("*"+m[1])); i >= 0 {
			return 1 + bytes.Count(data[:i], []byte("\n"))
		}
		return 0
	}
	return badByteLine(data)
}

// badByteLine finds the line of the first byte YAML refuses to read (a
// control character or invalid UTF-8); yaml.v3 reports those without a line.
// It returns 0 if there is none.
func badByteLine(data []byte) int {
	line := 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return line
		}
		if r == '\n' {
			line++
		} else if r < 0x20 && r != '\t' && r != '\r' || r == 0x7f {
			return line
		}
		data = data[size:]
	}
	return 0
}
