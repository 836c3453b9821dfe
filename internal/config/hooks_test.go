// The tests check hashes as the daemon does, where proxy/socks5 sets the hook.

package config

import "github.com/splicer/splicer/proxy/socks5/passwd"

func init() {
	CheckPasswordHash = func(hash string) error {
		_, err := passwd.Parse(hash)
		return err
	}
}
