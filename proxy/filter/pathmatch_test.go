// Path matching can be told to ignore case and ";params", for origins that do: /ADMIN and /admin;x=1 are then blocked like /admin.

package filter

import "testing"

func TestBlockedPathOptions(t *testing.T) {
	pats := []string{"/admin", "/admin/*", "*.exe"}
	for _, tc := range []struct {
		path                    string
		ignoreCase, stripParams bool
		blocked                 bool
	}{
		{"/admin", false, false, true},
		{"/ADMIN", false, false, false},
		{"/ADMIN", true, false, true},
		{"/admin;x=1", false, false, false},
		{"/admin;x=1", false, true, true},
		{"/Admin;jsessionid=1/panel", true, true, true},
		{"/files/SETUP.EXE", true, false, true},
		{"/files/setup.exe;v=2", false, true, true},
		{"/public", true, true, false},
	} {
		_, got := blockedPath(pats, tc.path, tc.ignoreCase, tc.stripParams)
		if got != tc.blocked {
			t.Errorf("%q (ignore case %v, strip params %v): blocked %v, want %v", tc.path, tc.ignoreCase, tc.stripParams, got, tc.blocked)
		}
	}
}
