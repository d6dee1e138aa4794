//! Listening TCP sockets from `/proc/net/tcp` and `/proc/net/tcp6`, with
//! the process holding each one where this server may look (it maps socket
//! inodes to processes through `/proc/<pid>/fd`).

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::Path;

use abx_wire::api::ListeningPort;

/// `st` of a listening socket in `/proc/net/tcp*`.
const LISTEN: &str = "0A";

/// One listening socket before its owner is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socket {
    /// `tcp` or `tcp6`.
    pub protocol: &'static str,
    /// Bound address as the API writes it.
    pub address: String,
    /// Port.
    pub port: u16,
    /// Socket inode, to find its process.
    pub inode: u64,
}

/// Parses a `/proc/net/tcp` (or `tcp6`) table into its listening sockets.
pub fn parse_table(text: &str, protocol: &'static str) -> Vec<Socket> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) != Some(&LISTEN) {
                return None;
            }
            let (addr, port) = fields.get(1)?.split_once(':')?;
            Some(Socket {
                protocol,
                address: decode_address(addr)?,
                port: u16::from_str_radix(port, 16).ok()?,
                inode: fields.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// Decodes the kernel's hex address: 32-bit words in host byte order.
fn decode_address(hex: &str) -> Option<String> {
    let words: Option<Vec<[u8; 4]>> = (0..hex.len() / 8)
        .map(|i| hex.get(i * 8..i * 8 + 8).and_then(|w| u32::from_str_radix(w, 16).ok()).map(u32::to_ne_bytes))
        .collect();
    let bytes: Vec<u8> = words?.concat();
    match bytes.len() {
        4 => Some(Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string()),
        16 => {
            let octets: [u8; 16] = bytes.try_into().ok()?;
            Some(format!("[{}]", Ipv6Addr::from(octets)))
        }
        _ => None,
    }
}

/// The first process (lowest pid) holding each of `inodes`, with its name.
/// Processes this server may not inspect are skipped.
pub fn owners(proc_root: &Path, inodes: &HashSet<u64>) -> HashMap<u64, (u32, String)> {
    let mut found = HashMap::new();
    let Ok(entries) = std::fs::read_dir(proc_root) else {
        return found;
    };
    let mut pids: Vec<u32> = entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    pids.sort_unstable();
    for pid in pids {
        if found.len() == inodes.len() {
            break;
        }
        let dir = proc_root.join(pid.to_string());
        let Ok(fds) = std::fs::read_dir(dir.join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let Ok(target) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let inode = target
                .to_str()
                .and_then(|t| t.strip_prefix("socket:[")?.strip_suffix(']')?.parse::<u64>().ok())
                .filter(|i| inodes.contains(i));
            if let Some(inode) = inode {
                found.entry(inode).or_insert_with(|| {
                    let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
                    (pid, name.trim().to_string())
                });
            }
        }
    }
    found
}

/// Every listening TCP socket, sorted by port, with its owner where visible.
pub fn listening(proc_root: &Path) -> Vec<ListeningPort> {
    let read = |name: &str| std::fs::read_to_string(proc_root.join("net").join(name)).unwrap_or_default();
    let mut sockets = parse_table(&read("tcp"), "tcp");
    sockets.extend(parse_table(&read("tcp6"), "tcp6"));
    let inodes: HashSet<u64> = sockets.iter().map(|s| s.inode).filter(|&i| i != 0).collect();
    let owners = owners(proc_root, &inodes);
    let mut ports: Vec<ListeningPort> = sockets
        .into_iter()
        .map(|s| {
            let owner = owners.get(&s.inode);
            ListeningPort {
                port: s.port,
                protocol: s.protocol.to_string(),
                address: s.address,
                pid: owner.map(|o| o.0),
                process: owner.map(|o| o.1.clone()).filter(|n| !n.is_empty()),
            }
        })
        .collect();
    ports.sort_by(|a, b| (a.port, &a.protocol, &a.address).cmp(&(b.port, &b.protocol, &b.address)));
    ports
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2383 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 41234 1 0000000000000000 100 0 0 10 0
   1: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 555 1 0000000000000000 100 0 0 10 0
   2: 0100007F:2383 0100007F:C000 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0000000000000000 20 4 30 10 -1
";

    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 888 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000001000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 999 1 0000000000000000 100 0 0 10 0
   2: 0000000000000000FFFF00000100007F:0050 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1000 1 0000000000000000 100 0 0 10 0
";

    #[test]
    #[cfg(target_endian = "little")]
    fn listening_sockets_are_decoded() {
        let v4 = parse_table(TCP, "tcp");
        assert_eq!(
            v4,
            [
                Socket { protocol: "tcp", address: "127.0.0.1".into(), port: 9091, inode: 41234 },
                Socket { protocol: "tcp", address: "0.0.0.0".into(), port: 2024, inode: 555 },
            ],
            "established connections are left out"
        );
        let v6: Vec<(String, u16)> = parse_table(TCP6, "tcp6").into_iter().map(|s| (s.address, s.port)).collect();
        assert_eq!(v6, [("[::]".into(), 8080), ("[::1]".into(), 22), ("[::ffff:127.0.0.1]".into(), 80)]);
    }

    #[test]
    fn a_socket_this_process_holds_is_found_with_its_pid() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let ports = listening(Path::new("/proc"));
        let mine = ports.iter().find(|p| p.port == port && p.protocol == "tcp").expect("listed");
        assert_eq!(mine.address, "127.0.0.1");
        assert_eq!(mine.pid, Some(std::process::id()));
        assert!(mine.process.as_deref().is_some_and(|n| !n.is_empty()));
    }
}
