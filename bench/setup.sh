#!/usr/bin/env bash
# Installs what the benchmarks drive and compare against, from Debian's packages:
# wrk (the load generator), nginx and haproxy (the C proxies bench/lb_overhead.py
# puts side by side with SteadyServe's load balancer). Needs root. .ci/run uses it.
#
# The benchmark runs its own nginx and HAProxy (foreground, 127.0.0.1, config in a
# temp dir), so the packages' system services must not start: they would listen
# on port 80 (nginx) and, in a container without an init system, their start can
# fail and fail the install. While installing, a policy-rc.d that denies every
# service action is put in place (unless one exists already), then removed.
set -euo pipefail

missing=()
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }
have wrk || missing+=(wrk)
have nginx || missing+=(nginx)
have haproxy || missing+=(haproxy)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# bench/setup.sh: no service starts while installing\nexit 101\n' >"$policy"
    chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
