"""Guest-initiated power-off: `shutdown -h now`, `poweroff`, `halt -p`, `systemctl poweroff` inside a VM.

What a cloud does when the guest OS powers itself off, and what the lab emulates (the watcher acts through
the fake cloud's API, then kills the VM as for any instance that stopped running):
- EC2: the instance stops, or is terminated when its InstanceInitiatedShutdownBehavior is `terminate`
  (dlrun sets it). `halt` without power-off only halts the CPU: the instance keeps running.
  (AWS user guide, "Change instance initiated shutdown behavior".) Emulated by reading the attribute
  (describe_instance_attribute) and calling terminate_instances, else stop_instances. (moto then gives
  the state reason Client.UserInitiatedShutdown where EC2 gives Client.InstanceInitiatedShutdown.)
- GCE: the instance goes to TERMINATED (stopped), with a compute.instances.guestTerminate system
  operation ("Instance terminated by guest OS shutdown"), whatever its scheduling says: GCE applies
  instanceTerminationAction=DELETE to preemption and to the time limit (maxRunDuration/terminationTime)
  only. Emulated by FakeGce.guest_shutdown: TERMINATED, the boot disk kept and billed. A node that must
  leave nothing behind deletes itself (dlrun's self-end script) before it powers off.

How, inside a VM:
- the image's /usr/local/sbin (the lab layer of image.py; first on the PATH the init gives boot scripts and `vm.run`, as on root's
  PATH on Debian/Ubuntu) holds COMMAND_SCRIPT as `shutdown`, `poweroff`, `halt`, `reboot` and `systemctl`, hiding the host's
  binaries of those names. They parse systemd's options, print what systemd's wall message says
  ("... The system will power off now!") on stdout (so it lands in the console log when a boot script
  runs them), write the request (action and command line) to REQUEST in the VM's private /run, and send
  systemd's signal for it to the VM's init (PID 1 of its PID namespace): SIGRTMIN+4 poweroff,
  SIGRTMIN+3 halt. `shutdown +N` / `shutdown hh:mm` schedule it (`shutdown -c` cancels); `shutdown -k`
  only prints; `reboot` (and `shutdown -r`, `systemctl reboot|kexec|soft-reboot`) is refused with exit 1:
  a reboot is not emulated. Other `systemctl` verbs run the image's systemctl when it has one (the
  lab's Debian minbase root has none; a systemctl there would find no systemd as PID 1), else say what
  systemctl says without systemd. Only root may power off (others: exit 1).
- the init (vm_init.py) then writes "[vm] <action> requested by `<command>`" to the console, stops every
  other process of the VM (SIGTERM, then SIGKILL after GRACE_S), writes the kernel's "reboot: Power down"
  (or "reboot: System halted") and the marker MARKER (JSON: action, command, time) into the VM's
  directory on the host, and idles until the lab kills it.
- the lab's watchers read the marker each poll (Vm.power_request) and act once per VM as above.
Nothing of this can reach the host: the commands only signal PID 1 of the VM's PID namespace (the host's
binaries are not even visible in a VM), and reboot(2), called in a PID namespace other than the initial
one, only kills that namespace's init (the lab does not take that for a power-off: the instance keeps running with a dead VM until the cloud ends it).
"""
from __future__ import annotations

from pathlib import Path

MARKER = "power"  # in the VM's directory (Vm.vm_dir), written by the VM's init
REQUEST = "/run/vm-power/request"  # inside the VM: action and command line, for the init
SCHEDULED = "/run/vm-power/scheduled"  # inside the VM: pid of a scheduled shutdown's sleeper
COMMANDS = ("shutdown", "poweroff", "halt", "reboot", "systemctl")
GRACE_S = 2.0  # between SIGTERM and SIGKILL at power-off (systemd waits up to 90 s)

COMMAND_SCRIPT = r"""#!/bin/bash
# An emulated VM's shutdown/poweroff/halt/reboot/systemctl: asks the VM's init (PID 1) to power off or
# halt, as systemd's signals do; never the host. See tests/support/vm/power.py in the project under test.
set -u
name=${0##*/}
cmdline="$name${*:+ $*}"
dir=${REQUEST%/*}
action= delay=0 wall=1 dry=

fail() { echo "$name: $*" >&2; exit 1; }

parse_time() {  # $1: now, +MINUTES or HH:MM -> delay (seconds)
    case $1 in
    now) delay=0 ;;
    +[0-9]*)
        [[ ${1#+} =~ ^[0-9]+$ ]] || fail "Failed to parse time specification: $1"
        delay=$(( 10#${1#+} * 60 )) ;;
    [0-9]*:[0-9]*)
        local at
        at=$(date -d "$1" +%s 2>/dev/null) || fail "Failed to parse time specification: $1"
        delay=$(( at - $(date +%s) )); (( delay >= 0 )) || delay=$(( delay + 86400 )) ;;
    *) fail "Failed to parse time specification: $1" ;;
    esac
}

cancel() {
    if [ -f "$SCHEDULED" ]; then
        kill -- "-$(cat "$SCHEDULED")" 2>/dev/null  # the timer's session: its shell and its sleep
        rm -f "$SCHEDULED"
    fi
    exit 0
}

case $name in
shutdown)
    action=poweroff delay=60
    while [ $# -gt 0 ]; do
        case $1 in
        -H|--halt) action=halt ;;
        -P|--poweroff) action=poweroff ;;
        -r|--reboot) action=reboot ;;
        -h) [ "$action" = halt ] || action=poweroff ;;
        -k) dry=1 ;;
        --no-wall) wall= ;;
        -c) cancel ;;
        --show) [ -f "$SCHEDULED" ] && echo "Shutdown scheduled" || echo "No scheduled shutdown."; exit 0 ;;
        --help) echo "$name [OPTIONS...] [TIME] [WALL...] (emulated: -H -P -r -h -k -c --no-wall)"; exit 0 ;;
        -f|-F|-a|-n|-q) ;;  # sysvinit's options, ignored as systemd does
        --) shift; break ;;
        -*) fail "invalid option -- '$1'" ;;
        *) break ;;
        esac
        shift
    done
    [ $# -gt 0 ] && parse_time "$1" ;;
poweroff|halt|reboot)
    action=$name
    while [ $# -gt 0 ]; do
        case $1 in
        --halt) action=halt ;;
        -p|--poweroff) [ "$name" = reboot ] || action=poweroff ;;
        --reboot) action=reboot ;;
        -w|--wtmp-only) exit 0 ;;
        --no-wall) wall= ;;
        -f|--force|-d|--no-wtmp|-n|--no-sync|-i) ;;
        --help) echo "$name [OPTIONS...]  (emulated VM: --halt -p --reboot -w --no-wall)"; exit 0 ;;
        *) fail "invalid option -- '$1'" ;;
        esac
        shift
    done ;;
systemctl)
    verb= target=
    for a in "$@"; do
        case $a in
        -*) ;;
        *) if [ -z "$verb" ]; then verb=$a; elif [ -z "$target" ]; then target=$a; fi ;;
        esac
    done
    case $verb:$target in
    poweroff:*|start:poweroff.target|isolate:poweroff.target) action=poweroff ;;
    halt:*|start:halt.target|isolate:halt.target) action=halt ;;
    reboot:*|kexec:*|soft-reboot:*|start:reboot.target|isolate:reboot.target) action=reboot ;;
    *)
        for real in /usr/bin/systemctl /bin/systemctl; do
            [ -x "$real" ] && exec "$real" "$@"
        done
        echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
        exit 1 ;;
    esac ;;
*) fail "unknown power command" ;;
esac

[ "$(id -u)" = 0 ] || fail "Access denied: only root may $action this machine"
if [ "$action" = reboot ]; then
    fail "a reboot is not emulated by the VM lab (a real machine would restart); nothing done"
fi
case $action in
poweroff) verb_text="power off" signal=RTMIN+4 ;;
halt) verb_text="halt" signal=RTMIN+3 ;;
esac

if (( delay > 0 )) && [ -z "$dry" ]; then  # only shutdown takes a time: $0 is shutdown
    mkdir -p "$dir"
    [ -f "$SCHEDULED" ] && kill -- "-$(cat "$SCHEDULED")" 2>/dev/null  # the last one wins
    flag=-P; [ "$action" = halt ] && flag=-H
    VM_POWER_CMDLINE=$cmdline setsid bash -c 'sleep "$1" && rm -f "$2" && exec "$3" "$4" --no-wall now' \
        shutdown-timer "$delay" "$SCHEDULED" "$0" "$flag" </dev/null >/dev/null 2>&1 &
    echo $! > "$SCHEDULED"
    echo "Shutdown scheduled for $(date -d "@$(( $(date +%s) + delay ))"), use 'shutdown -c' to cancel."
    exit 0
fi

if [ -n "$wall" ]; then
    echo "Broadcast message from root@$(hostname) ($(date)): The system will $verb_text now!"
fi
[ -n "$dry" ] && exit 0
mkdir -p "$dir"
printf '%s\n%s\n' "$action" "${VM_POWER_CMDLINE:-$cmdline}" > "$REQUEST.$$" && mv -f "$REQUEST.$$" "$REQUEST"
kill -s "$signal" 1
"""


def install_commands(sbin: Path) -> None:
    """Writes the power commands into `sbin` (the image's /usr/local/sbin)."""
    sbin.mkdir(parents=True, exist_ok=True)
    script = COMMAND_SCRIPT.replace("set -u\n", f"set -u\nREQUEST={REQUEST}\nSCHEDULED={SCHEDULED}\n", 1)
    for name in COMMANDS:
        path = sbin / name
        path.write_text(script)
        path.chmod(0o755)
