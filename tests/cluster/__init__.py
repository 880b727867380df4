"""A real multi-host network on one machine: namespace hosts with OpenSSH sshd and simulated GPUs.

Library (root: network namespaces; otherwise SimSshHost servers on 127.0.0.1):
    hosts.ClusterHostSpec(name, gpus: SimHostGpus | None, announce={"_ssh._tcp", "_fleet._tcp"})
    netcluster.start_netns_cluster(specs, detached=False) -> Cluster   (sync; Cluster.close())
    fallback.start_local_cluster(specs) -> LocalCluster                (async; await aclose())
    Cluster: hosts, host(name), known_hosts_file, inventory_file, ssh_config_file, client_key,
        controller_address, bridge, run_id, state_file, write_client_files(), close()
    host: name, address, port, user, identity_file, known_hosts_line, namespace, config_path,
        set_gpus(), link_down/up(), kill_sshd/start_sshd(), freeze_sshd/thaw_sshd(),
        netem(delay_ms=, loss_pct=)/clear_netem(), rotate_host_key(), crash(), reboot(),
        processes(), start_announcer(services)/stop_announcer()
Pytest fixtures (tests/fixtures/cluster.py): cluster, netns_cluster, netns_cluster_module.
CLI (repo root): python -m tests.cluster up N [--gpus SPEC] [--foreground] | down | status
"""
