// Tests of route matching.

package httprev

import (
	"testing"

	"github.com/splicer/splicer/internal/config"
)

func TestRouteMatches(t *testing.T) {
	for _, tc := range []struct {
		route      config.Route
		host, path string
		want       bool
	}{
		{config.Route{}, "any", "/x", true},
		{config.Route{Host: "Example.com"}, "example.COM:8080", "/", true},
		{config.Route{Host: "example.com"}, "other.com", "/", false},
		{config.Route{Path: "/a"}, "h", "/a", true},
		{config.Route{Path: "/a"}, "h", "/a/b", false},
		{config.Route{PathPrefix: "/api/"}, "h", "/api/v1", true},
		{config.Route{PathPrefix: "/api/"}, "h", "/apix", false},
		{config.Route{PathSuffix: ".png"}, "h", "/img/x.png", true},
		{config.Route{PathSuffix: ".png"}, "h", "/img/x.jpg", false},
		{config.Route{Host: "a.com", PathPrefix: "/s"}, "b.com", "/s", false},
	} {
		r := Route{Route: tc.route}
		if got := r.Matches(tc.host, tc.path); got != tc.want {
			t.Errorf("%+v matches host %q path %q = %v, want %v", tc.route, tc.host, tc.path, got, tc.want)
		}
	}
}
