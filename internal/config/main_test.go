// The engine names config's tests validate listeners against, registered the way engine/all registers the real ones.

package config

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	RegisterEngines("ip", "sockmap", "pipe", "copy")
	os.Exit(m.Run())
}
