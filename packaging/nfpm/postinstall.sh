#!/bin/sh
# postinstall: the dedicated system user the unit runs as, then pick up the unit.
set -e
if ! getent passwd splicer >/dev/null; then
	useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin splicer 2>/dev/null ||
		adduser --system --no-create-home --group splicer
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
