#!/usr/bin/env bash
# Install hopper. Idempotent: re-run it to upgrade from this checkout.
#
#   ./install.sh                  # for you: venv in ~/.local/share/hopper, ~/.local/bin/hopper,
#                                 #   `man hopper` (~/.local/share/man/man1/hopper.1)
#   ./install.sh --user-unit      # ... and the user unit ~/.config/systemd/user/hopper.service,
#                                 #     ~/.config/hopper/config.toml and env (if missing)
#   sudo ./install.sh --system    # the service: `hopper` account, venv in /opt/hopper,
#                                 #   /usr/local/bin/hopper, /usr/local/share/man/man1/hopper.1,
#                                 #   /etc/systemd/system/hopper.service,
#                                 #   /etc/hopper/config.toml, /etc/hopper/env (mode 600)
#   ./install.sh [--system] --uninstall   # remove what it installed; never the jobs' data
#   ./install.sh --web ...        # also the dashboard (`hopper web`: the 'web' extra) and,
#                                 #   with --user-unit or --system, hopper-web.service
#
# Options:
#   --prefix DIR      user: DIR/share/hopper/venv + DIR/bin/hopper (default ~/.local);
#                     system: the venv itself (default /opt/hopper)
#   --dest-root DIR   (or DESTDIR=DIR) lay every file under DIR instead of /: for packaging
#                     and tests. Never runs useradd or systemctl; the units name the final
#                     paths, the venv runs from DIR.
#   --source PATH     what to pip install (default: this checkout; a built wheel is faster)
#   --no-systemctl    never run systemctl, only print the commands
#
# systemctl runs only when systemd is running (daemon-reload after a unit change);
# enabling and starting are left to you: the commands are printed.
# Needs Python >= 3.11 with venv (Debian: apt-get install python3-venv).
set -euo pipefail
umask 022
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode=user
user_unit=0
uninstall=0
web=0
prefix=""
dest="${DESTDIR:-}"
source_spec="$here"
use_systemctl=1
die() { echo "install.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || { echo "install.sh: --prefix needs a value" >&2; exit 2; }
                  prefix="$2"; shift 2 ;;
        --dest-root) [ $# -ge 2 ] || { echo "install.sh: --dest-root needs a value" >&2; exit 2; }
                     dest="$2"; shift 2 ;;
        --source) [ $# -ge 2 ] || { echo "install.sh: --source needs a value" >&2; exit 2; }
                  source_spec="$2"; shift 2 ;;
        --system) mode=system; shift ;;
        --user-unit) user_unit=1; shift ;;
        --web) web=1; shift ;;
        --uninstall) uninstall=1; shift ;;
        --no-systemctl) use_systemctl=0; shift ;;
        -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
if [ "$mode" = system ] && [ "$user_unit" = 1 ]; then
    echo "install.sh: --system and --user-unit exclude each other" >&2; exit 2
fi
if [ -n "$dest" ]; then
    mkdir -p "$dest"
    dest="$(cd "$dest" && pwd)"
    [ "$dest" != / ] || dest=""
    use_systemctl=0
fi
case "$prefix" in /*|"") ;; *) prefix="$(pwd)/$prefix" ;; esac

# -- where things go (final paths; "$dest" is put in front of every write) ----------
if [ "$mode" = system ]; then
    venv="${prefix:-/opt/hopper}"
    bin_link=/usr/local/bin/hopper
    unit_dir=/etc/systemd/system
    unit_template=hopper.service
    web_template=hopper-web.service
    conf_dir=/etc/hopper
    state_dir=/var/lib/hopper
    systemctl=(systemctl)
    if [ -z "$dest" ] && [ "$(id -u)" != 0 ]; then
        die "--system needs root (sudo ./install.sh --system), or --dest-root DIR to stage"
    fi
else
    prefix="${prefix:-$HOME/.local}"
    venv="$prefix/share/hopper/venv"
    bin_link="$prefix/bin/hopper"
    config_home="${XDG_CONFIG_HOME:-$HOME/.config}"
    unit_dir="$config_home/systemd/user"
    unit_template=hopper-user.service
    web_template=hopper-web-user.service
    conf_dir="$config_home/hopper"
    state_dir="${XDG_STATE_HOME:-$HOME/.local/state}/hopper"
    systemctl=(systemctl --user)
fi
hopper_bin="$venv/bin/hopper"
# beside the bin/ of the command: man finds share/man next to each directory on PATH
man_page="$(dirname "$(dirname "$bin_link")")/share/man/man1/hopper.1"
unit="$unit_dir/hopper.service"
web_unit="$unit_dir/hopper-web.service"
manifest="$venv/.hopper-installed"   # "KIND SHA256 PATH" of what this script created

systemd_running() {
    [ "$use_systemctl" = 1 ] && [ -d /run/systemd/system ] || return 1
    if [ "$mode" = user ]; then
        [ -S "${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/systemd/private" ] || return 1
    fi
    command -v systemctl >/dev/null
}
why_no_systemctl() {
    if [ -n "$dest" ]; then echo "staged under --dest-root $dest"
    elif [ "$use_systemctl" = 0 ]; then echo "--no-systemctl"
    elif [ ! -d /run/systemd/system ]; then echo "systemd is not running on this machine"
    else echo "no user systemd manager is running for $(id -un)"
    fi
}
step() { printf '  %-44s # %s\n' "$1" "$2"; }
sha() { sha256sum "$1" | cut -d' ' -f1; }
record() {  # record KIND PATH: remember a file this script created (first time only)
    local kind="$1" path="$2" digest=-
    [ -f "$dest$manifest" ] && grep -q " $path\$" "$dest$manifest" && return 0
    [ "$kind" = file ] && digest="$(sha "$dest$path")"
    echo "$kind $digest $path" >> "$dest$manifest"
}
write_ours() {  # write_ours PATH: stdin to PATH, rewritten at each install (its digest too)
    local path="$1" tmp
    if [ -e "$dest$path" ] && ! { [ -f "$dest$manifest" ] && grep -q " $path\$" "$dest$manifest"; }
    then
        echo "kept:      $dest$path (not installed by this script)"; cat >/dev/null; return 0
    fi
    mkdir -p "$(dirname "$dest$path")"
    tmp="$(mktemp "$dest$path.XXXXXX")"
    cat > "$tmp"
    chmod 644 "$tmp"
    mv -f "$tmp" "$dest$path"
    if [ -f "$dest$manifest" ]; then
        grep -v " $path\$" "$dest$manifest" > "$dest$manifest.new" || true
        mv -f "$dest$manifest.new" "$dest$manifest"
    fi
    record file "$path"
}
write_new() {  # write_new PATH MODE: stdin to PATH unless it exists (never overwrite)
    local path="$1" mode="$2" tmp
    if [ -e "$dest$path" ]; then echo "kept:      $dest$path (exists)"; cat >/dev/null; return 0; fi
    mkdir -p "$(dirname "$dest$path")"
    tmp="$(mktemp "$dest$path.XXXXXX")"
    cat > "$tmp"
    chmod "$mode" "$tmp"
    mv -f "$tmp" "$dest$path"
    record file "$path"
    echo "created:   $dest$path"
}

# -- uninstall ------------------------------------------------------------------------
if [ "$uninstall" = 1 ]; then
    if systemd_running && "${systemctl[@]}" cat hopper.service >/dev/null 2>&1; then
        echo "stopping and disabling hopper.service (running jobs are ended)"
        "${systemctl[@]}" disable --now hopper.service || true
    fi
    if [ -f "$dest$manifest" ]; then
        while read -r kind digest path; do
            case "$kind" in
                file)
                    if [ -f "$dest$path" ] && [ "$(sha "$dest$path")" != "$digest" ]; then
                        echo "kept:      $dest$path (changed since install; remove it yourself)"
                    elif [ -e "$dest$path" ]; then
                        rm -f "$dest$path"; echo "removed:   $dest$path"
                    fi ;;
            esac
        done < "$dest$manifest"
    fi
    if [ -f "$dest$web_unit" ] && grep -qi 'hopper web dashboard' "$dest$web_unit"; then
        if systemd_running; then "${systemctl[@]}" disable --now hopper-web.service || true; fi
        rm -f "$dest$web_unit"; echo "removed:   $dest$web_unit"
    fi
    if [ -f "$dest$unit" ] && grep -q '^ExecStart=.* run' "$dest$unit" \
            && grep -qi 'hopper job watcher' "$dest$unit"; then
        rm -f "$dest$unit"; echo "removed:   $dest$unit"
        if systemd_running; then "${systemctl[@]}" daemon-reload || true; fi
    fi
    if [ -L "$dest$bin_link" ] && [ "$(readlink "$dest$bin_link")" = "$hopper_bin" ]; then
        rm -f "$dest$bin_link"; echo "removed:   $dest$bin_link"
    fi
    if [ -f "$dest$venv/pyvenv.cfg" ]; then
        rm -rf "$dest$venv"; echo "removed:   $dest$venv"
    fi
    rmdir "$dest$conf_dir" 2>/dev/null || true
    rmdir "$dest$(dirname "$man_page")" 2>/dev/null || true   # man1/, if nothing else is in it
    [ "$mode" = system ] || rmdir "$dest$prefix/share/hopper" 2>/dev/null || true
    [ ! -d "$dest$state_dir" ] || echo "kept:      $dest$state_dir (the jobs' data: inbox, runs, processed)"
    if [ "$mode" = system ] && [ -z "$dest" ] && getent passwd hopper >/dev/null; then
        echo "kept:      the hopper account (userdel hopper, once its files are gone)"
    fi
    exit 0
fi

# -- install ----------------------------------------------------------------------------
PY="${PYTHON:-python3}"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || {
    echo "install.sh: hopper needs Python 3.11 or newer ($PY is $("$PY" -V 2>&1))" >&2; exit 1; }

if [ "$mode" = system ] && [ -z "$dest" ] && ! getent passwd hopper >/dev/null; then
    group_opt=(--user-group)
    getent group hopper >/dev/null && group_opt=(--gid hopper)
    useradd --system "${group_opt[@]}" --home-dir /var/lib/hopper --no-create-home \
            --shell /usr/sbin/nologin --comment "hopper job service" hopper
    echo "created:   the hopper system account"
fi

if [ -e "$dest$venv" ] && [ ! -f "$dest$venv/pyvenv.cfg" ] \
        && [ -n "$(ls -A "$dest$venv" 2>/dev/null)" ]; then
    die "$dest$venv exists and is not a virtualenv; choose another --prefix"
fi
upgrade=0
if [ -x "$dest$venv/bin/python" ]; then upgrade=1; else
    mkdir -p "$(dirname "$dest$venv")"
    "$PY" -m venv "$dest$venv"
fi
pip_spec="$source_spec"
[ "$web" = 0 ] || pip_spec="$source_spec[web]"   # the dashboard's extra: starlette, uvicorn
if [ "$upgrade" = 1 ] && "$dest$venv/bin/python" -m pip show --quiet hopper >/dev/null 2>&1; then
    # This venv holds hopper under its old distribution name, "hopper" (before 0.1.0 was
    # renamed hopper-jobs: "hopper" on PyPI is another project). Two distributions owning
    # one package and one command would break at the next uninstall: remove the old first.
    "$dest$venv/bin/python" -m pip uninstall --quiet --yes hopper
    echo "removed:   the old distribution name 'hopper' (now hopper-jobs) from $dest$venv"
fi
"$dest$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade "$pip_spec"
version="$("$dest$hopper_bin" --version)"
echo "installed: $dest$hopper_bin ($version)"
mkdir -p "$(dirname "$dest$bin_link")"
if [ -e "$dest$bin_link" ] && [ ! -L "$dest$bin_link" ]; then
    echo "kept:      $dest$bin_link (not a link of ours; call $hopper_bin)"
else
    ln -sfn "$hopper_bin" "$dest$bin_link"
fi

"$dest$venv/bin/python" -m hopper.cli.manpage | write_ours "$man_page"
echo "manual:    $dest$man_page (man hopper)"

if [ "$mode" = system ] || [ "$user_unit" = 1 ]; then
    render_opts=()
    [ -z "$dest" ] || render_opts=(--allow-missing)   # the unit names the final path
    unit_before="$(cat "$dest$unit" "$dest$web_unit" 2>/dev/null || true)"
    "$PY" "$here/scripts/render-units" --bin "$hopper_bin" --out "$dest$unit_dir" \
        --unit "$unit_template" --name hopper.service ${render_opts[@]+"${render_opts[@]}"} >/dev/null
    echo "unit:      $dest$unit"
    if [ "$web" = 1 ]; then
        "$PY" "$here/scripts/render-units" --bin "$hopper_bin" --out "$dest$unit_dir" \
            --unit "$web_template" --name hopper-web.service ${render_opts[@]+"${render_opts[@]}"} >/dev/null
        echo "unit:      $dest$web_unit"
    fi
    "$dest$hopper_bin" config template | write_new "$conf_dir/config.toml" 644
    write_new "$conf_dir/env" 600 <<EOF
# Environment of the hopper service (systemd EnvironmentFile=): KEY=value lines,
# no "export". Keep this file mode 600. After a change, restart the service.
# ANTHROPIC_API_KEY=sk-ant-...
# OPENAI_API_KEY=sk-...
EOF
    if [ "$mode" = system ]; then
        mkdir -p "$dest$state_dir"
        chmod 0750 "$dest$state_dir"
        [ -n "$dest" ] || chown hopper:hopper "$dest$state_dir"
    fi
    if ! systemd_running; then
        echo "not running systemctl: $(why_no_systemctl)"
    elif [ "$unit_before" != "$(cat "$dest$unit" "$dest$web_unit" 2>/dev/null || true)" ]; then
        "${systemctl[@]}" daemon-reload
        echo "ran:       ${systemctl[*]} daemon-reload"
    fi
    echo "next:"
    s=""
    if [ "$mode" = system ]; then s="sudo "; fi
    step "$s${systemctl[*]} enable --now hopper" "start now and at every boot"
    if [ "$upgrade" = 1 ]; then
        step "$s${systemctl[*]} reload hopper" "after an upgrade: re-exec, jobs keep running"
    fi
    if [ "$web" = 1 ]; then
        step "$s${systemctl[*]} enable --now hopper-web" "the dashboard on 127.0.0.1:8642"
        u=""; [ "$mode" = system ] && u="sudo -u hopper "
        step "$u$bin_link web --print-url --root $state_dir" "its URL, with the token (docs/web.md)"
    fi
    if [ "$mode" = system ]; then
        step "sudoedit /etc/hopper/env" "API keys for the agents"
        step "sudo -u hopper $bin_link doctor --root $state_dir" "check it all"
    else
        step "loginctl enable-linger \"\$USER\"" "keep it running while you are logged out"
        step "$bin_link doctor" "check it all"
    fi
fi
case ":$PATH:" in
    *":$(dirname "$bin_link"):"*) ;;
    *) echo "note: $(dirname "$bin_link") is not on your PATH; add it, or call $bin_link" ;;
esac
