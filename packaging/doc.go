// Package packaging holds no code: its tests check the release files beside it (the systemd unit, the logrotate snippet, the nfpm scripts, the example configuration) and at the top (.goreleaser.yaml, Dockerfile).
package packaging
