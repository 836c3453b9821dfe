#!/bin/sh
# preremove: stop the service before its files go.
set -e
if [ -d /run/systemd/system ]; then
	systemctl stop splicer.service 2>/dev/null || true
	systemctl disable splicer.service 2>/dev/null || true
fi
