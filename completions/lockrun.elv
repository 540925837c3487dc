
use builtin;
use str;

set edit:completion:arg-completer[lockrun] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'lockrun'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'lockrun'= {
            cand --backend 'Where the locks live: consul, or local (this host only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is consul'
            cand --lock-dir 'local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY` shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise]'
            cand --http-addr 'Consul agent address: host:port, http://host:port or https://host:port'
            cand --token-file 'Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN)'
            cand --ca-file 'CA certificate file to verify Consul''s TLS certificate'
            cand --ca-path 'Directory of CA certificates'
            cand --client-cert 'Client certificate for Consul''s verify_incoming'
            cand --client-key 'Client key for Consul''s verify_incoming'
            cand --tls-server-name 'Server name to verify Consul''s certificate against (SNI)'
            cand --datacenter 'Datacenter to use (default: the agent''s)'
            cand --namespace 'Enterprise namespace'
            cand --log-format 'Format of lockrun''s own messages on stderr'
            cand --allow-network-fs 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
            cand -v 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand --verbose 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand -q 'Nothing on stderr but fatal errors'
            cand --quiet 'Nothing on stderr but fatal errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand elect 'Run COMMAND while holding the leader lock on KEY'
            cand semaphore 'Run COMMAND while holding one of N slots of the semaphore PREFIX'
            cand leader 'Print who holds the lock on KEY (or the semaphore PREFIX)'
            cand release 'Force-release the lock on KEY (or semaphore slots), from any host'
            cand completions 'Print the completion script for SHELL on stdout'
            cand man 'Write the man pages into DIR: lockrun(1) and one page per subcommand'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'lockrun;elect'= {
            cand --ttl 'Session TTL; Consul allows 10s to 24h. Shorter notices a dead host sooner'
            cand --lock-delay 'How long Consul keeps the lock from a new holder after the session is invalidated (0s to 60s). It is the child''s grace window on a partition'
            cand --behavior 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]'
            cand --session-name 'Session name shown in Consul [default: lockrun on HOST for KEY]'
            cand --node-checks 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores'
            cand --service-checks 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks'
            cand --timeout 'Give up after DURATION without the lock (exit 75)'
            cand -E 'Exit status when the lock was not acquired (like flock -E); 0 makes a conflict count as success, for cron jobs another host already ran'
            cand --conflict-exit-code 'Exit status when the lock was not acquired (like flock -E); 0 makes a conflict count as success, for cron jobs another host already ran'
            cand --kill-signal 'Signal that asks the child to stop when the lock is lost'
            cand --kill-timeout 'Grace period after the kill signal before SIGKILL [default: 5s for elect, 2s for semaphore, less if --ttl or --lock-delay leave less room]. It must fit in the safety budget (lockrun says by how much if it does not). When Consul reports the lock lost, only what the lock-delay leaves is granted (none for a semaphore)'
            cand --value 'Value stored in the lock entry [default: this host''s name]'
            cand --notify 'Speak systemd''s notify protocol (Type=notify): READY=1 once the lock is held (`--notify` or `--notify=held`) or at start (`--notify=start`), STATUS= lines, WATCHDOG=1 while the lease is confirmed, STOPPING=1. COMMAND then does not inherit NOTIFY_SOCKET or WATCHDOG_*'
            cand --min-hold 'Keep the lock at least DURATION after taking it, even when COMMAND finishes sooner, so that hosts whose cron fires later in the same period find it held: with `-n -E 0`, a job runs once per period'
            cand --backend 'Where the locks live: consul, or local (this host only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is consul'
            cand --lock-dir 'local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY` shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise]'
            cand --http-addr 'Consul agent address: host:port, http://host:port or https://host:port'
            cand --token-file 'Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN)'
            cand --ca-file 'CA certificate file to verify Consul''s TLS certificate'
            cand --ca-path 'Directory of CA certificates'
            cand --client-cert 'Client certificate for Consul''s verify_incoming'
            cand --client-key 'Client key for Consul''s verify_incoming'
            cand --tls-server-name 'Server name to verify Consul''s certificate against (SNI)'
            cand --datacenter 'Datacenter to use (default: the agent''s)'
            cand --namespace 'Enterprise namespace'
            cand --log-format 'Format of lockrun''s own messages on stderr'
            cand --campaign 'After losing the lock, stop the child and campaign again instead of exiting 124 (for long-running daemons)'
            cand --no-checks 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)'
            cand -n 'Try once; if the lock is taken, exit 75 at once (a network blip is retried for up to 500ms)'
            cand --no-wait 'Try once; if the lock is taken, exit 75 at once (a network blip is retried for up to 500ms)'
            cand --shell 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...'
            cand --allow-network-fs 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
            cand -v 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand --verbose 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand -q 'Nothing on stderr but fatal errors'
            cand --quiet 'Nothing on stderr but fatal errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lockrun;semaphore'= {
            cand -l 'Number of slots; every contender on PREFIX must agree'
            cand --limit 'Number of slots; every contender on PREFIX must agree'
            cand --ttl 'Session TTL; Consul allows 10s to 24h. Shorter notices a dead host sooner'
            cand --lock-delay 'How long Consul keeps the lock from a new holder after the session is invalidated (0s to 60s). It is the child''s grace window on a partition'
            cand --behavior 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]'
            cand --session-name 'Session name shown in Consul [default: lockrun on HOST for KEY]'
            cand --node-checks 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores'
            cand --service-checks 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks'
            cand --timeout 'Give up after DURATION without the lock (exit 75)'
            cand -E 'Exit status when the lock was not acquired (like flock -E); 0 makes a conflict count as success, for cron jobs another host already ran'
            cand --conflict-exit-code 'Exit status when the lock was not acquired (like flock -E); 0 makes a conflict count as success, for cron jobs another host already ran'
            cand --kill-signal 'Signal that asks the child to stop when the lock is lost'
            cand --kill-timeout 'Grace period after the kill signal before SIGKILL [default: 5s for elect, 2s for semaphore, less if --ttl or --lock-delay leave less room]. It must fit in the safety budget (lockrun says by how much if it does not). When Consul reports the lock lost, only what the lock-delay leaves is granted (none for a semaphore)'
            cand --value 'Value stored in the lock entry [default: this host''s name]'
            cand --notify 'Speak systemd''s notify protocol (Type=notify): READY=1 once the lock is held (`--notify` or `--notify=held`) or at start (`--notify=start`), STATUS= lines, WATCHDOG=1 while the lease is confirmed, STOPPING=1. COMMAND then does not inherit NOTIFY_SOCKET or WATCHDOG_*'
            cand --min-hold 'Keep the lock at least DURATION after taking it, even when COMMAND finishes sooner, so that hosts whose cron fires later in the same period find it held: with `-n -E 0`, a job runs once per period'
            cand --backend 'Where the locks live: consul, or local (this host only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is consul'
            cand --lock-dir 'local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY` shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise]'
            cand --http-addr 'Consul agent address: host:port, http://host:port or https://host:port'
            cand --token-file 'Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN)'
            cand --ca-file 'CA certificate file to verify Consul''s TLS certificate'
            cand --ca-path 'Directory of CA certificates'
            cand --client-cert 'Client certificate for Consul''s verify_incoming'
            cand --client-key 'Client key for Consul''s verify_incoming'
            cand --tls-server-name 'Server name to verify Consul''s certificate against (SNI)'
            cand --datacenter 'Datacenter to use (default: the agent''s)'
            cand --namespace 'Enterprise namespace'
            cand --log-format 'Format of lockrun''s own messages on stderr'
            cand --no-checks 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)'
            cand -n 'Try once; if the lock is taken, exit 75 at once (a network blip is retried for up to 500ms)'
            cand --no-wait 'Try once; if the lock is taken, exit 75 at once (a network blip is retried for up to 500ms)'
            cand --shell 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...'
            cand --allow-network-fs 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
            cand -v 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand --verbose 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand -q 'Nothing on stderr but fatal errors'
            cand --quiet 'Nothing on stderr but fatal errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lockrun;leader'= {
            cand --timeout 'With --wait: give up after DURATION (exit 1)'
            cand --backend 'Where the locks live: consul, or local (this host only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is consul'
            cand --lock-dir 'local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY` shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise]'
            cand --http-addr 'Consul agent address: host:port, http://host:port or https://host:port'
            cand --token-file 'Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN)'
            cand --ca-file 'CA certificate file to verify Consul''s TLS certificate'
            cand --ca-path 'Directory of CA certificates'
            cand --client-cert 'Client certificate for Consul''s verify_incoming'
            cand --client-key 'Client key for Consul''s verify_incoming'
            cand --tls-server-name 'Server name to verify Consul''s certificate against (SNI)'
            cand --datacenter 'Datacenter to use (default: the agent''s)'
            cand --namespace 'Enterprise namespace'
            cand --log-format 'Format of lockrun''s own messages on stderr'
            cand --json 'Print one JSON object, the same for a key and a semaphore: {"key", "kind": "lock"|"semaphore", "held", "limit" (null for a lock), "holders": [{"key", "value", "value_base64", "flags", "session", "session_name", "node", "ttl", "lock_index", "create_index", "modify_index"}]}; with --watch, one per line'
            cand --wait 'Wait until there is a holder'
            cand --watch 'Print a line at every change of holder until interrupted'
            cand --allow-network-fs 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
            cand -v 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand --verbose 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand -q 'Nothing on stderr but fatal errors'
            cand --quiet 'Nothing on stderr but fatal errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lockrun;release'= {
            cand --session 'Only if this session holds it (for a semaphore: free this holder''s slot)'
            cand --backend 'Where the locks live: consul, or local (this host only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is consul'
            cand --lock-dir 'local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY` shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise]'
            cand --http-addr 'Consul agent address: host:port, http://host:port or https://host:port'
            cand --token-file 'Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN)'
            cand --ca-file 'CA certificate file to verify Consul''s TLS certificate'
            cand --ca-path 'Directory of CA certificates'
            cand --client-cert 'Client certificate for Consul''s verify_incoming'
            cand --client-key 'Client key for Consul''s verify_incoming'
            cand --tls-server-name 'Server name to verify Consul''s certificate against (SNI)'
            cand --datacenter 'Datacenter to use (default: the agent''s)'
            cand --namespace 'Enterprise namespace'
            cand --log-format 'Format of lockrun''s own messages on stderr'
            cand --destroy-session 'Also destroy the holder''s session (its other locks go too, after their lock-delay)'
            cand --all 'Semaphore: free every slot'
            cand --allow-network-fs 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
            cand -v 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand --verbose 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand -q 'Nothing on stderr but fatal errors'
            cand --quiet 'Nothing on stderr but fatal errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lockrun;completions'= {
            cand --backend 'Where the locks live: consul, or local (this host only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is consul'
            cand --lock-dir 'local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY` shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise]'
            cand --http-addr 'Consul agent address: host:port, http://host:port or https://host:port'
            cand --token-file 'Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN)'
            cand --ca-file 'CA certificate file to verify Consul''s TLS certificate'
            cand --ca-path 'Directory of CA certificates'
            cand --client-cert 'Client certificate for Consul''s verify_incoming'
            cand --client-key 'Client key for Consul''s verify_incoming'
            cand --tls-server-name 'Server name to verify Consul''s certificate against (SNI)'
            cand --datacenter 'Datacenter to use (default: the agent''s)'
            cand --namespace 'Enterprise namespace'
            cand --log-format 'Format of lockrun''s own messages on stderr'
            cand --allow-network-fs 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
            cand -v 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand --verbose 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand -q 'Nothing on stderr but fatal errors'
            cand --quiet 'Nothing on stderr but fatal errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lockrun;man'= {
            cand --dir 'Directory to write the pages into, e.g. /usr/local/share/man/man1'
            cand --backend 'Where the locks live: consul, or local (this host only, no server). Never chosen for you: without it (or LOCKRUN_BACKEND) it is consul'
            cand --lock-dir 'local: the lock directory; KEY is the file DIR/KEY, which `flock DIR/KEY` shares [default: /run/lockrun for root, $XDG_RUNTIME_DIR/lockrun or /tmp/lockrun-UID otherwise]'
            cand --http-addr 'Consul agent address: host:port, http://host:port or https://host:port'
            cand --token-file 'Read the ACL token from FILE (else CONSUL_HTTP_TOKEN_FILE, CONSUL_HTTP_TOKEN)'
            cand --ca-file 'CA certificate file to verify Consul''s TLS certificate'
            cand --ca-path 'Directory of CA certificates'
            cand --client-cert 'Client certificate for Consul''s verify_incoming'
            cand --client-key 'Client key for Consul''s verify_incoming'
            cand --tls-server-name 'Server name to verify Consul''s certificate against (SNI)'
            cand --datacenter 'Datacenter to use (default: the agent''s)'
            cand --namespace 'Enterprise namespace'
            cand --log-format 'Format of lockrun''s own messages on stderr'
            cand --allow-network-fs 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
            cand -v 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand --verbose 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
            cand -q 'Nothing on stderr but fatal errors'
            cand --quiet 'Nothing on stderr but fatal errors'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'lockrun;help'= {
            cand elect 'Run COMMAND while holding the leader lock on KEY'
            cand semaphore 'Run COMMAND while holding one of N slots of the semaphore PREFIX'
            cand leader 'Print who holds the lock on KEY (or the semaphore PREFIX)'
            cand release 'Force-release the lock on KEY (or semaphore slots), from any host'
            cand completions 'Print the completion script for SHELL on stdout'
            cand man 'Write the man pages into DIR: lockrun(1) and one page per subcommand'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'lockrun;help;elect'= {
        }
        &'lockrun;help;semaphore'= {
        }
        &'lockrun;help;leader'= {
        }
        &'lockrun;help;release'= {
        }
        &'lockrun;help;completions'= {
        }
        &'lockrun;help;man'= {
        }
        &'lockrun;help;help'= {
        }
    ]
    $completions[$command]
}
