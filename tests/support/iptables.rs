//! iptables rule text shared by the tests that count or drop SYNs (`dead_paths`, the lab's
//! `dying_path`): the match and the reading of a rule's packet count. Does not run iptables.

/// The match of TCP SYNs to `ip:port`, commented `tag` so that a listing can find the rule.
pub fn syns_to(ip: &str, port: u16, tag: &str) -> Vec<String> {
    let port = port.to_string();
    let tcp = ["-p", "tcp", "-d", ip, "--dport", &port, "--syn"];
    let comment = ["-m", "comment", "--comment", tag];
    tcp.iter().chain(&comment).map(|s| s.to_string()).collect()
}

/// The packets counted by the rule commented `tag` in `iptables -L <chain> -n -v -x` output.
pub fn packets(listing: &str, tag: &str) -> Option<u64> {
    listing
        .lines()
        .find(|l| l.contains(tag))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
}

#[test]
fn a_listed_rules_packet_count_is_found_by_its_comment() {
    let listing = "Chain INPUT (policy ACCEPT 0 packets, 0 bytes)\n\
        \x20   pkts      bytes target     prot opt in     out     source               destination\n\
        \x20     7      420            tcp  --  eth0   *       0.0.0.0/0            10.0.0.2             tcp dpt:6443 flags:0x17/0x02 /* rp-syn-count */\n";
    assert_eq!(packets(listing, "rp-syn-count"), Some(7));
    assert_eq!(packets(listing, "other"), None);
    let rule = syns_to("10.0.0.2", 6443, "rp-syn-count").join(" ");
    assert_eq!(
        rule,
        "-p tcp -d 10.0.0.2 --dport 6443 --syn -m comment --comment rp-syn-count"
    );
}
