#!/usr/bin/env bash
# Installs HPRM for systemd: the daemons (hprm-store, hprm-rti, and hprm and
# hprm-link when built), the unit templates of deploy/, an example /etc/hprm/store.conf
# (never overwriting one that exists), the README with the deployment and
# troubleshooting pages of docs/, and the system user
# `hprm` the units run as. Then, per program: hprm deploy --systemd DIR PROGRAM.
#
#   deploy/install.sh [--prefix ROOT] [--bin-dir DIR] [--from DIR] [--link FILE] [--dry-run]
#
#   --prefix ROOT  install into ROOT instead of / (a package or image root,
#                  or a test); no user is created and systemd is not reloaded
#   --bin-dir DIR  where the binaries go on the host (default /usr/local/bin);
#                  the units' ExecStart lines point there
#   --from DIR     take built binaries from DIR instead of building them
#                  (default: cargo build --release, then target/release)
#   --link FILE    the hprm-link binary (default: DIR/hprm-link, else
#                  hprm-link/target/release/hprm-link, when built)
#   --dry-run      print what would be done, change nothing
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="" bin_dir=/usr/local/bin from="" link="" dry=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="${2:?--prefix needs a directory}"; shift 2 ;;
        --bin-dir) bin_dir="${2:?--bin-dir needs a directory}"; shift 2 ;;
        --from) from="${2:?--from needs a directory}"; shift 2 ;;
        --link) link="${2:?--link needs the hprm-link binary}"; shift 2 ;;
        --dry-run) dry=1; shift ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "install.sh: unknown option $1; see deploy/install.sh --help" >&2; exit 2 ;;
    esac
done
case "$bin_dir" in /*) ;; *) echo "install.sh: --bin-dir $bin_dir is not absolute; give the directory on the host, e.g. /usr/local/bin" >&2; exit 2 ;; esac
prefix="${prefix%/}"

run() {
    if [ "$dry" = 1 ]; then printf '+ %s\n' "$*"; else "$@"; fi
}
say() { printf '==> %s\n' "$*"; }

if [ -z "$from" ]; then
    from=target/release
    say "building the daemons (cargo build --release)"
    packages=(-p hprm-store -p hprm-rti)
    [ -f hprm-cli/Cargo.toml ] && packages+=(-p hprm-cli)
    run cargo build --release "${packages[@]}"
fi
for b in hprm-store hprm-rti; do
    if [ "$dry" = 0 ] && [ ! -x "$from/$b" ]; then
        echo "install.sh: $from/$b is missing; build it (cargo build --release -p $b) or point --from at the directory holding it" >&2
        exit 1
    fi
done

say "binaries -> $prefix$bin_dir"
run install -d "$prefix$bin_dir"
for b in hprm-store hprm-rti hprm; do
    if [ -x "$from/$b" ] || { [ "$dry" = 1 ] && [ "$b" != hprm ]; }; then
        run install -m 0755 "$from/$b" "$prefix$bin_dir/$b"
    fi
done
# hprm-link (programs that span hosts) is its own Cargo project: installed
# when built (cargo build --release --manifest-path hprm-link/Cargo.toml).
if [ -n "$link" ]; then
    [ "$dry" = 1 ] || [ -x "$link" ] || { echo "install.sh: --link $link is not an executable" >&2; exit 1; }
    run install -m 0755 "$link" "$prefix$bin_dir/hprm-link"
else
    for l in "$from/hprm-link" hprm-link/target/release/hprm-link; do
        if [ -x "$l" ]; then
            link=$l
            run install -m 0755 "$l" "$prefix$bin_dir/hprm-link"
            break
        fi
    done
    [ -n "$link" ] || echo "    no hprm-link built: programs that span hosts need it (cargo build --release --manifest-path hprm-link/Cargo.toml, or --link FILE)"
fi

units="$prefix/etc/systemd/system"
say "unit templates -> $units"
run install -d "$units"
for u in hprm-store.service 'hprm-rti@.service' 'hprm-federate@.service' 'hprm-link@.service' 'hprm-record@.service' 'hprm@.target'; do
    if [ "$dry" = 1 ]; then
        printf '+ sed s|/usr/local/bin/|%s/| deploy/%s > %s/%s\n' "$bin_dir" "$u" "$units" "$u"
    else
        sed "s|/usr/local/bin/|${bin_dir%/}/|g" "deploy/$u" > "$units/$u"
        chmod 0644 "$units/$u"
    fi
done

say "configuration -> $prefix/etc/hprm"
run install -d "$prefix/etc/hprm"
if [ -e "$prefix/etc/hprm/store.conf" ]; then
    echo "    keeping the existing $prefix/etc/hprm/store.conf"
else
    run install -m 0644 deploy/etc/hprm/store.conf "$prefix/etc/hprm/store.conf"
fi
run install -d "$prefix/usr/local/share/doc/hprm"
run install -m 0644 README.md "$prefix/usr/local/share/doc/hprm/README.md"
run install -m 0644 docs/src/deployment.md docs/src/troubleshooting.md "$prefix/usr/local/share/doc/hprm/"

if [ -z "$prefix" ]; then
    if ! getent passwd hprm >/dev/null; then
        say "creating the system user hprm"
        run useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin hprm
    fi
    if [ -d /run/systemd/system ]; then
        run systemctl daemon-reload
    fi
    say "done; enable the store: systemctl enable --now hprm-store.service"
else
    say "done (into $prefix: no user created, systemd not reloaded)"
fi
echo "    then, per program: hprm deploy --systemd DIR PROGRAM (prints the remaining steps)"
