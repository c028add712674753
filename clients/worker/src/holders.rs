//! Who holds the ledger's jobs, as this worker can tell: its own process
//! identity (sent with AdoptJobs), whether another holder's process on this
//! host is gone (so its claims are taken over now rather than when their
//! lease runs out), and what it still waits for.

use std::collections::HashMap;

use tally_proto::v1 as pb;

/// This process as AdoptJobs records it, where the system tells (Linux:
/// `/proc`); `None` elsewhere, and then nothing is taken over early.
pub fn this_process() -> Option<pb::WorkerProcess> {
    let pid = std::process::id();
    Some(pb::WorkerProcess {
        host: host_name()?,
        boot_id: boot_and_namespace()?,
        pid: i64::from(pid),
        start_ticks: start_ticks(&format!("/proc/{pid}/stat"))?,
    })
}

/// The host name, as the kernel has it.
pub fn host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    let name = name.trim();
    (!name.is_empty() && name.len() <= 253).then(|| name.to_string())
}

/// `{boot id}/{pid namespace}`: pids are comparable only within both.
fn boot_and_namespace() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let ns = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let id = format!("{}/{}", boot.trim(), ns.to_string_lossy());
    (id.len() <= 64).then_some(id)
}

/// Field 22 of `/proc/{pid}/stat`: the process's start, in clock ticks
/// since boot; `None` when there is no such process, or only its zombie
/// (it has ended; its parent has not collected it yet).
fn start_ticks(path: &str) -> Option<i64> {
    let stat = std::fs::read_to_string(path).ok()?;
    parse_start_ticks(&stat)
}

/// The command name (field 2) may hold spaces and parentheses, so fields
/// are counted after its last `)`: field 3 (the state) is the first, 22
/// the 20th.
fn parse_start_ticks(stat: &str) -> Option<i64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    if matches!(fields.next()?, "Z" | "X" | "x") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Whether `holder` is provably gone, as seen from `me`: on this host, and
/// either of another boot, or in this boot and PID namespace with no
/// process of its pid started when it was. Anything else (another host,
/// another namespace, no process recorded) cannot be told from here.
pub fn is_gone(me: &pb::WorkerProcess, holder: &pb::WorkerProcess) -> bool {
    is_gone_with(me, holder, |pid| start_ticks(&format!("/proc/{pid}/stat")))
}

fn is_gone_with(
    me: &pb::WorkerProcess,
    holder: &pb::WorkerProcess,
    started: impl Fn(i64) -> Option<i64>,
) -> bool {
    if holder.host != me.host || holder == me || holder.pid <= 0 {
        return false;
    }
    let (Some((my_boot, my_ns)), Some((boot, ns))) =
        (me.boot_id.split_once('/'), holder.boot_id.split_once('/'))
    else {
        return false;
    };
    if boot != my_boot {
        // Every process of an earlier boot of this host has ended.
        return true;
    }
    ns == my_ns && started(holder.pid) != Some(holder.start_ticks)
}

/// The holders among `held` this process has shown to be gone.
pub fn gone_holders(me: &pb::WorkerProcess, held: &[pb::HeldJob]) -> Vec<pb::WorkerProcess> {
    let mut out: Vec<pb::WorkerProcess> = Vec::new();
    for p in held.iter().filter_map(|h| h.process.as_ref()) {
        if !out.contains(p) && is_gone(me, p) {
            out.push(p.clone());
        }
    }
    out
}

/// Says what the worker waits for: each job another holder's lease still
/// covers, once per (job, holder) — a live holder renews its lease with
/// every heartbeat — so a wait is in the log without a line per poll.
#[derive(Default)]
pub struct Waiting {
    said: HashMap<String, String>,
}

impl Waiting {
    pub fn note(&mut self, held: &[pb::HeldJob]) {
        self.said
            .retain(|job, _| held.iter().any(|h| &h.job == job));
        for h in held {
            if self.said.get(&h.job) == Some(&h.owner) {
                continue;
            }
            let until = h
                .lease_expire_time
                .as_ref()
                .map_or_else(String::new, ToString::to_string);
            let process = h.process.as_ref().map_or_else(
                || "a process it did not name".to_string(),
                |p| format!("pid {} on {}", p.pid, p.host),
            );
            tracing::info!(job = %h.job, state = ?h.state(), owner = %h.owner, holder = %process, lease_until = %until,
                "job held by another worker; adopted when its lease ends (or at once if that worker is shown gone, or hands it over)");
            self.said.insert(h.job.clone(), h.owner.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(host: &str, boot: &str, pid: i64, start: i64) -> pb::WorkerProcess {
        pb::WorkerProcess {
            host: host.into(),
            boot_id: boot.into(),
            pid,
            start_ticks: start,
        }
    }

    // Invariant: a holder is called gone only when this host can prove it:
    // another boot, or this boot and namespace with its pid not running
    // since its start. Other hosts and other namespaces are never gone.
    #[test]
    fn gone_only_when_provable() {
        let me = p("h", "b1/pid:[1]", 10, 100);
        let alive = |pid: i64| (pid == 20).then_some(200);
        assert!(!is_gone_with(&me, &me, alive), "itself");
        assert!(
            !is_gone_with(&me, &p("other", "b1/pid:[1]", 30, 1), alive),
            "another host"
        );
        assert!(
            !is_gone_with(&me, &p("h", "b1/pid:[2]", 30, 1), alive),
            "another namespace"
        );
        assert!(
            !is_gone_with(&me, &p("h", "b1/pid:[1]", 20, 200), alive),
            "running"
        );
        assert!(
            is_gone_with(&me, &p("h", "b1/pid:[1]", 20, 150), alive),
            "pid reused"
        );
        assert!(
            is_gone_with(&me, &p("h", "b1/pid:[1]", 30, 1), alive),
            "no such pid"
        );
        assert!(
            is_gone_with(&me, &p("h", "b0/pid:[1]", 20, 200), alive),
            "earlier boot"
        );
        assert!(
            !is_gone_with(&me, &p("h", "nonsense", 30, 1), alive),
            "unreadable boot id"
        );
    }

    #[test]
    fn start_ticks_after_a_name_with_spaces_and_parentheses() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 98765 1000 50";
        assert_eq!(parse_start_ticks(stat), Some(98765));
        assert_eq!(parse_start_ticks("42 (x) S 1"), None);
        let zombie = stat.replace(") S ", ") Z ");
        assert_eq!(parse_start_ticks(&zombie), None, "a zombie has ended");
    }

    // Invariant: this process is never gone to itself, and is alive as
    // /proc reads it.
    #[test]
    fn this_process_is_alive() {
        let Some(me) = this_process() else {
            return;
        };
        assert!(!is_gone(&me, &me));
        let twin = pb::WorkerProcess {
            host: me.host.clone(),
            boot_id: me.boot_id.clone(),
            pid: me.pid,
            start_ticks: me.start_ticks + 1,
        };
        assert!(is_gone(&me, &twin), "same pid, another start: gone");
    }
}
