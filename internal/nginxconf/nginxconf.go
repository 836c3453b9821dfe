// Package nginxconf writes the part of an nginx configuration that keeps nginx's temporary files in one directory, for the benchmarks' nginx and the tests'.
package nginxconf

import "fmt"

// TempPaths is the http block's directives that put every temporary
// file nginx may write (request bodies, proxied responses, the fastcgi,
// uwsgi and scgi buffers) in a directory of its own under dir: nginx,
// run as a user would without installing it, then writes nothing outside
// the directory it was given. Each line ends in a newline.
func TempPaths(dir string) string {
	return fmt.Sprintf(`	client_body_temp_path %[1]s/body;
	proxy_temp_path %[1]s/proxy;
	fastcgi_temp_path %[1]s/fastcgi;
	uwsgi_temp_path %[1]s/uwsgi;
	scgi_temp_path %[1]s/scgi;
`, dir)
}
