// Skips in CI: the allow-list of tests that may skip there, and the check of a verbose test log against it.

package testenv

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// skipLine is how `go test -v` reports a skipped test or subtest.
var skipLine = regexp.MustCompile(`^\s*--- SKIP: (\S+) \(`)

// AllowedSkips parses an allow-list: one `TestName: reason` a line, the
// name a test or subtest as `go test -v` prints it; blank lines and lines
// starting with # are comments. A line without a reason is an error: a
// skip CI lets pass must say why it cannot run there.
func AllowedSkips(r io.Reader) (map[string]string, error) {
	allowed := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, reason, ok := strings.Cut(line, ":")
		name, reason = strings.TrimSpace(name), strings.TrimSpace(reason)
		if !ok || name == "" || strings.ContainsAny(name, " \t") || reason == "" {
			return nil, fmt.Errorf("line %d: %q is not `TestName: reason`", n, line)
		}
		allowed[name] = reason
	}
	return allowed, sc.Err()
}

// UnexpectedSkips returns the tests a verbose test log reports skipped
// that allowed does not name, in the order of the log.
func UnexpectedSkips(log io.Reader, allowed map[string]string) ([]string, error) {
	var bad []string
	sc := bufio.NewScanner(log)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := skipLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		if _, ok := allowed[m[1]]; !ok {
			bad = append(bad, m[1])
		}
	}
	return bad, sc.Err()
}
