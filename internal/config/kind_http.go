// The http section (http-forward, http-reverse, filter) and http-reverse's routes and pools.
package config

// HTTP configures the HTTP proxies' limits and cache.
type HTTP struct {
	// ConnectPorts are the ports CONNECT may reach (http-forward).
	ConnectPorts []int `yaml:"connect_ports"`
	// HeaderTimeout bounds reading a request head (slowloris).
	HeaderTimeout Duration `yaml:"header_timeout"`
	// MaxHeaderBytes and MaxHeaders bound a request head.
	MaxHeaderBytes Size `yaml:"max_header_bytes"`
	MaxHeaders     int  `yaml:"max_headers"`
	// CacheBytes bounds the in-memory response cache (http-forward); 0 disables it.
	CacheBytes Size `yaml:"cache_bytes"`
}

// Route sends requests matching Host and a path rule to a pool (http-reverse).
type Route struct {
	Host       string `yaml:"host"`
	Path       string `yaml:"path"`
	PathPrefix string `yaml:"path_prefix"`
	PathSuffix string `yaml:"path_suffix"`
	Pool       string `yaml:"pool"`
}

// Pool is a group of back-ends and how to pick one (http-reverse).
type Pool struct {
	Name        string       `yaml:"name"`
	Balance     string       `yaml:"balance"`
	Servers     []string     `yaml:"servers"`
	HealthCheck *HealthCheck `yaml:"health_check"`
}

// HealthCheck is an active HTTP health check of a pool's servers.
type HealthCheck struct {
	Path     string   `yaml:"path"`
	Interval Duration `yaml:"interval"`
	Timeout  Duration `yaml:"timeout"`
}

// Balances are the values of a pool's balance key.
var Balances = []string{"round_robin", "least_conn", "consistent_hash"}

func (v *validator) http(p string, l *Listener) {
	pools := map[string]bool{}
	for i, pl := range l.Pools {
		pp := p + ".pools[" + itoa(i) + "]"
		if pl.Name == "" {
			v.errorf(pp+".name", "a pool needs a name")
		}
		pools[pl.Name] = true
		if pl.Balance != "" {
			v.oneOf(pp+".balance", pl.Balance, Balances)
		}
		if len(pl.Servers) == 0 {
			v.errorf(pp+".servers", "a pool needs at least one server host:port")
		}
		for j, s := range pl.Servers {
			if _, _, err := parseAddr(s, upstreamAddr); err != nil {
				v.errorf(pp+".servers["+itoa(j)+"]", "%v", err)
			}
		}
	}
	for i, r := range l.Routes {
		if !pools[r.Pool] {
			v.errorf(p+".routes["+itoa(i)+"].pool", "unknown pool %q", r.Pool)
		}
	}
}
