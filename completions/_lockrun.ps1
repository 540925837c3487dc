
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'lockrun' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'lockrun'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'lockrun' {
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('elect', 'elect', [CompletionResultType]::ParameterValue, 'Run COMMAND while holding the leader lock on KEY')
            [CompletionResult]::new('semaphore', 'semaphore', [CompletionResultType]::ParameterValue, 'Run COMMAND while holding one of N slots of the semaphore PREFIX')
            [CompletionResult]::new('leader', 'leader', [CompletionResultType]::ParameterValue, 'Print who holds the lock on KEY (or the semaphore PREFIX)')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Force-release the lock on KEY (or semaphore slots), from any host')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print the completion script for SHELL on stdout')
            [CompletionResult]::new('man', 'man', [CompletionResultType]::ParameterValue, 'Write the man pages into DIR: lockrun(1) and one page per subcommand')
            [CompletionResult]::new('unit', 'unit', [CompletionResultType]::ParameterValue, 'Print a systemd unit that runs this lockrun: the binary''s own path')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Exit 0 while this lockrun''s lock is held with enough time left (for COMMAND)')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Exit 0 only while the holder a sequencer names still holds its lock')
            [CompletionResult]::new('put', 'put', [CompletionResultType]::ParameterValue, 'Write KEY=VALUE into the engine only while a sequencer''s holder holds its lock')
            [CompletionResult]::new('explain', 'explain', [CompletionResultType]::ParameterValue, 'Print the timing promise that elect or semaphore would keep with these flags')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lockrun;elect' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'How long the engine keeps a silent holder''s lock')
            [CompletionResult]::new('--lock-delay', '--lock-delay', [CompletionResultType]::ParameterName, 'How long Consul keeps a lost lock from a new holder')
            [CompletionResult]::new('--behavior', '--behavior', [CompletionResultType]::ParameterName, 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]')
            [CompletionResult]::new('--session-name', '--session-name', [CompletionResultType]::ParameterName, 'Session name shown in Consul [default: lockrun on HOST for KEY]')
            [CompletionResult]::new('--node-checks', '--node-checks', [CompletionResultType]::ParameterName, 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores')
            [CompletionResult]::new('--service-checks', '--service-checks', [CompletionResultType]::ParameterName, 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks')
            [CompletionResult]::new('--clock-rate-error', '--clock-rate-error', [CompletionResultType]::ParameterName, 'The largest combined clock-rate error the stop window allows for')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up after DURATION without the lock (exit 75)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--kill-signal', '--kill-signal', [CompletionResultType]::ParameterName, 'Signal that asks the child to stop when the lock is lost')
            [CompletionResult]::new('--kill-timeout', '--kill-timeout', [CompletionResultType]::ParameterName, 'Grace period after the kill signal before SIGKILL')
            [CompletionResult]::new('--leftovers', '--leftovers', [CompletionResultType]::ParameterName, 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND''s either way')
            [CompletionResult]::new('--containment', '--containment', [CompletionResultType]::ParameterName, 'How COMMAND''s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service''s cgroup not delegated stays systemd''s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree''s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got')
            [CompletionResult]::new('--value', '--value', [CompletionResultType]::ParameterName, 'Value stored in the lock entry [default: this host''s name]; printable characters only (`leader` prints one holder a line)')
            [CompletionResult]::new('--notify', '--notify', [CompletionResultType]::ParameterName, 'Speak systemd''s notify protocol (Type=notify)')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock at least DURATION after taking it')
            [CompletionResult]::new('--status-addr', '--status-addr', [CompletionResultType]::ParameterName, 'Serve /status, /leader and /metrics on ADDR while lockrun runs')
            [CompletionResult]::new('--on-acquire', '--on-acquire', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` once the lock is held, before COMMAND')
            [CompletionResult]::new('--on-loss', '--on-loss', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND was stopped on a loss')
            [CompletionResult]::new('--on-release', '--on-release', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND exited and the lock was released')
            [CompletionResult]::new('--hook-timeout', '--hook-timeout', [CompletionResultType]::ParameterName, 'How long a hook may run before its whole process group is killed')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--campaign', '--campaign', [CompletionResultType]::ParameterName, 'After a loss, stop the child and campaign again instead of exiting 124')
            [CompletionResult]::new('--no-checks', '--no-checks', [CompletionResultType]::ParameterName, 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--shell', '--shell', [CompletionResultType]::ParameterName, 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;semaphore' {
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Number of slots; every contender on PREFIX must agree')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Number of slots; every contender on PREFIX must agree')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'How long the engine keeps a silent holder''s lock')
            [CompletionResult]::new('--lock-delay', '--lock-delay', [CompletionResultType]::ParameterName, 'How long Consul keeps a lost lock from a new holder')
            [CompletionResult]::new('--behavior', '--behavior', [CompletionResultType]::ParameterName, 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]')
            [CompletionResult]::new('--session-name', '--session-name', [CompletionResultType]::ParameterName, 'Session name shown in Consul [default: lockrun on HOST for KEY]')
            [CompletionResult]::new('--node-checks', '--node-checks', [CompletionResultType]::ParameterName, 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores')
            [CompletionResult]::new('--service-checks', '--service-checks', [CompletionResultType]::ParameterName, 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks')
            [CompletionResult]::new('--clock-rate-error', '--clock-rate-error', [CompletionResultType]::ParameterName, 'The largest combined clock-rate error the stop window allows for')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up after DURATION without the lock (exit 75)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--kill-signal', '--kill-signal', [CompletionResultType]::ParameterName, 'Signal that asks the child to stop when the lock is lost')
            [CompletionResult]::new('--kill-timeout', '--kill-timeout', [CompletionResultType]::ParameterName, 'Grace period after the kill signal before SIGKILL')
            [CompletionResult]::new('--leftovers', '--leftovers', [CompletionResultType]::ParameterName, 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND''s either way')
            [CompletionResult]::new('--containment', '--containment', [CompletionResultType]::ParameterName, 'How COMMAND''s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service''s cgroup not delegated stays systemd''s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree''s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got')
            [CompletionResult]::new('--value', '--value', [CompletionResultType]::ParameterName, 'Value stored in the lock entry [default: this host''s name]; printable characters only (`leader` prints one holder a line)')
            [CompletionResult]::new('--notify', '--notify', [CompletionResultType]::ParameterName, 'Speak systemd''s notify protocol (Type=notify)')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock at least DURATION after taking it')
            [CompletionResult]::new('--status-addr', '--status-addr', [CompletionResultType]::ParameterName, 'Serve /status, /leader and /metrics on ADDR while lockrun runs')
            [CompletionResult]::new('--on-acquire', '--on-acquire', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` once the lock is held, before COMMAND')
            [CompletionResult]::new('--on-loss', '--on-loss', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND was stopped on a loss')
            [CompletionResult]::new('--on-release', '--on-release', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND exited and the lock was released')
            [CompletionResult]::new('--hook-timeout', '--hook-timeout', [CompletionResultType]::ParameterName, 'How long a hook may run before its whole process group is killed')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--no-checks', '--no-checks', [CompletionResultType]::ParameterName, 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--shell', '--shell', [CompletionResultType]::ParameterName, 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;leader' {
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'With --wait: give up after DURATION (exit 1)')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object, the same schema on every backend: {"key", "backend", "kind": "lock"|"semaphore", "held", "limit" (null for a lock), "holders": [...]}; with --watch, one per line. A holder is {"value", "fence", "since", "since_unix", "host", "pid", "details"}, null where the engine does not know; "fence" is the holder''s LOCKRUN_LOCK_INDEX where it can be read back (a Consul lock''s ModifyIndex, not its LockIndex; an etcd lockrun holder; local), else null; "details" holds the engine''s own facts (Consul''s entry and session)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Wait until there is a holder')
            [CompletionResult]::new('--watch', '--watch', [CompletionResultType]::ParameterName, 'Print a line at every change of holder until interrupted')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;release' {
            [CompletionResult]::new('--session', '--session', [CompletionResultType]::ParameterName, 'Only if this session holds it (for a semaphore: free this holder''s slot)')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--destroy-session', '--destroy-session', [CompletionResultType]::ParameterName, 'Also destroy the holder''s session (its other locks go too, after their lock-delay)')
            [CompletionResult]::new('--all', '--all', [CompletionResultType]::ParameterName, 'Semaphore: free every slot')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;completions' {
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;man' {
            [CompletionResult]::new('--dir', '--dir', [CompletionResultType]::ParameterName, 'Directory to write the pages into, e.g. /usr/local/share/man/man1')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;unit' {
            [CompletionResult]::new('--description', '--description', [CompletionResultType]::ParameterName, 'The unit''s Description= [default: COMMAND and the lock it runs under]')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;status' {
            [CompletionResult]::new('--status-addr', '--status-addr', [CompletionResultType]::ParameterName, 'The endpoint to ask: HOST:PORT or a unix socket path; by default LOCKRUN_STATUS, which lockrun sets in COMMAND''s environment')
            [CompletionResult]::new('--for', '--for', [CompletionResultType]::ParameterName, 'Exit 0 only with at least DURATION left before COMMAND would be stopped, on top of the safety margin')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;check' {
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;put' {
            [CompletionResult]::new('--sequencer', '--sequencer', [CompletionResultType]::ParameterName, 'The sequencer of the holder the write is fenced by: LOCKRUN_SEQUENCER')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;explain' {
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--json', '--json', [CompletionResultType]::ParameterName, 'Print one JSON object instead of text')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('elect', 'elect', [CompletionResultType]::ParameterValue, 'Explain `lockrun elect` with these flags')
            [CompletionResult]::new('semaphore', 'semaphore', [CompletionResultType]::ParameterValue, 'Explain `lockrun semaphore` with these flags')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lockrun;explain;elect' {
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'How long the engine keeps a silent holder''s lock')
            [CompletionResult]::new('--lock-delay', '--lock-delay', [CompletionResultType]::ParameterName, 'How long Consul keeps a lost lock from a new holder')
            [CompletionResult]::new('--behavior', '--behavior', [CompletionResultType]::ParameterName, 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]')
            [CompletionResult]::new('--session-name', '--session-name', [CompletionResultType]::ParameterName, 'Session name shown in Consul [default: lockrun on HOST for KEY]')
            [CompletionResult]::new('--node-checks', '--node-checks', [CompletionResultType]::ParameterName, 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores')
            [CompletionResult]::new('--service-checks', '--service-checks', [CompletionResultType]::ParameterName, 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks')
            [CompletionResult]::new('--clock-rate-error', '--clock-rate-error', [CompletionResultType]::ParameterName, 'The largest combined clock-rate error the stop window allows for')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up after DURATION without the lock (exit 75)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--kill-signal', '--kill-signal', [CompletionResultType]::ParameterName, 'Signal that asks the child to stop when the lock is lost')
            [CompletionResult]::new('--kill-timeout', '--kill-timeout', [CompletionResultType]::ParameterName, 'Grace period after the kill signal before SIGKILL')
            [CompletionResult]::new('--leftovers', '--leftovers', [CompletionResultType]::ParameterName, 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND''s either way')
            [CompletionResult]::new('--containment', '--containment', [CompletionResultType]::ParameterName, 'How COMMAND''s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service''s cgroup not delegated stays systemd''s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree''s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got')
            [CompletionResult]::new('--value', '--value', [CompletionResultType]::ParameterName, 'Value stored in the lock entry [default: this host''s name]; printable characters only (`leader` prints one holder a line)')
            [CompletionResult]::new('--notify', '--notify', [CompletionResultType]::ParameterName, 'Speak systemd''s notify protocol (Type=notify)')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock at least DURATION after taking it')
            [CompletionResult]::new('--status-addr', '--status-addr', [CompletionResultType]::ParameterName, 'Serve /status, /leader and /metrics on ADDR while lockrun runs')
            [CompletionResult]::new('--on-acquire', '--on-acquire', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` once the lock is held, before COMMAND')
            [CompletionResult]::new('--on-loss', '--on-loss', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND was stopped on a loss')
            [CompletionResult]::new('--on-release', '--on-release', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND exited and the lock was released')
            [CompletionResult]::new('--hook-timeout', '--hook-timeout', [CompletionResultType]::ParameterName, 'How long a hook may run before its whole process group is killed')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--campaign', '--campaign', [CompletionResultType]::ParameterName, 'After a loss, stop the child and campaign again instead of exiting 124')
            [CompletionResult]::new('--no-checks', '--no-checks', [CompletionResultType]::ParameterName, 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--shell', '--shell', [CompletionResultType]::ParameterName, 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;explain;semaphore' {
            [CompletionResult]::new('-l', '-l', [CompletionResultType]::ParameterName, 'Number of slots; every contender on PREFIX must agree')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Number of slots; every contender on PREFIX must agree')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'How long the engine keeps a silent holder''s lock')
            [CompletionResult]::new('--lock-delay', '--lock-delay', [CompletionResultType]::ParameterName, 'How long Consul keeps a lost lock from a new holder')
            [CompletionResult]::new('--behavior', '--behavior', [CompletionResultType]::ParameterName, 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]')
            [CompletionResult]::new('--session-name', '--session-name', [CompletionResultType]::ParameterName, 'Session name shown in Consul [default: lockrun on HOST for KEY]')
            [CompletionResult]::new('--node-checks', '--node-checks', [CompletionResultType]::ParameterName, 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores')
            [CompletionResult]::new('--service-checks', '--service-checks', [CompletionResultType]::ParameterName, 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks')
            [CompletionResult]::new('--clock-rate-error', '--clock-rate-error', [CompletionResultType]::ParameterName, 'The largest combined clock-rate error the stop window allows for')
            [CompletionResult]::new('--timeout', '--timeout', [CompletionResultType]::ParameterName, 'Give up after DURATION without the lock (exit 75)')
            [CompletionResult]::new('-E', '-E ', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit status when the lock was not acquired, as flock -E')
            [CompletionResult]::new('--kill-signal', '--kill-signal', [CompletionResultType]::ParameterName, 'Signal that asks the child to stop when the lock is lost')
            [CompletionResult]::new('--kill-timeout', '--kill-timeout', [CompletionResultType]::ParameterName, 'Grace period after the kill signal before SIGKILL')
            [CompletionResult]::new('--leftovers', '--leftovers', [CompletionResultType]::ParameterName, 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND''s either way')
            [CompletionResult]::new('--containment', '--containment', [CompletionResultType]::ParameterName, 'How COMMAND''s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service''s cgroup not delegated stays systemd''s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree''s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got')
            [CompletionResult]::new('--value', '--value', [CompletionResultType]::ParameterName, 'Value stored in the lock entry [default: this host''s name]; printable characters only (`leader` prints one holder a line)')
            [CompletionResult]::new('--notify', '--notify', [CompletionResultType]::ParameterName, 'Speak systemd''s notify protocol (Type=notify)')
            [CompletionResult]::new('--min-hold', '--min-hold', [CompletionResultType]::ParameterName, 'Keep the lock at least DURATION after taking it')
            [CompletionResult]::new('--status-addr', '--status-addr', [CompletionResultType]::ParameterName, 'Serve /status, /leader and /metrics on ADDR while lockrun runs')
            [CompletionResult]::new('--on-acquire', '--on-acquire', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` once the lock is held, before COMMAND')
            [CompletionResult]::new('--on-loss', '--on-loss', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND was stopped on a loss')
            [CompletionResult]::new('--on-release', '--on-release', [CompletionResultType]::ParameterName, 'Run CMD with `sh -c` after COMMAND exited and the lock was released')
            [CompletionResult]::new('--hook-timeout', '--hook-timeout', [CompletionResultType]::ParameterName, 'How long a hook may run before its whole process group is killed')
            [CompletionResult]::new('--backend', '--backend', [CompletionResultType]::ParameterName, 'Where the locks live')
            [CompletionResult]::new('--http-addr', '--http-addr', [CompletionResultType]::ParameterName, 'Consul agent: host:port, http://host:port or https://host:port')
            [CompletionResult]::new('--token-file', '--token-file', [CompletionResultType]::ParameterName, 'Read the ACL token from FILE')
            [CompletionResult]::new('--ca-file', '--ca-file', [CompletionResultType]::ParameterName, 'CA certificate file to verify Consul''s TLS certificate')
            [CompletionResult]::new('--ca-path', '--ca-path', [CompletionResultType]::ParameterName, 'Directory of CA certificates')
            [CompletionResult]::new('--client-cert', '--client-cert', [CompletionResultType]::ParameterName, 'Client certificate for Consul''s verify_incoming')
            [CompletionResult]::new('--client-key', '--client-key', [CompletionResultType]::ParameterName, 'Client key for Consul''s verify_incoming')
            [CompletionResult]::new('--tls-server-name', '--tls-server-name', [CompletionResultType]::ParameterName, 'Server name to verify Consul''s certificate against (SNI)')
            [CompletionResult]::new('--datacenter', '--datacenter', [CompletionResultType]::ParameterName, 'Datacenter to use (default: the agent''s)')
            [CompletionResult]::new('--namespace', '--namespace', [CompletionResultType]::ParameterName, 'Enterprise namespace')
            [CompletionResult]::new('--endpoints', '--endpoints', [CompletionResultType]::ParameterName, 'etcd: endpoints, comma-separated host:port or http(s)://host:port')
            [CompletionResult]::new('--cacert', '--cacert', [CompletionResultType]::ParameterName, 'etcd: CA certificate file (else ETCDCTL_CACERT)')
            [CompletionResult]::new('--cert', '--cert', [CompletionResultType]::ParameterName, 'etcd: client certificate file (else ETCDCTL_CERT)')
            [CompletionResult]::new('--cert-key', '--cert-key', [CompletionResultType]::ParameterName, 'etcd: the client certificate''s key file (else ETCDCTL_KEY)')
            [CompletionResult]::new('--dsn', '--dsn', [CompletionResultType]::ParameterName, 'postgres: a postgres:// URL or libpq `key=value` words')
            [CompletionResult]::new('--lock-dir', '--lock-dir', [CompletionResultType]::ParameterName, 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`')
            [CompletionResult]::new('--log-format', '--log-format', [CompletionResultType]::ParameterName, 'Format of lockrun''s own messages on stderr')
            [CompletionResult]::new('--no-checks', '--no-checks', [CompletionResultType]::ParameterName, 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)')
            [CompletionResult]::new('-n', '-n', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--no-wait', '--no-wait', [CompletionResultType]::ParameterName, 'Try once; if the lock is taken, exit 75 at once')
            [CompletionResult]::new('--shell', '--shell', [CompletionResultType]::ParameterName, 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...')
            [CompletionResult]::new('--allow-network-fs', '--allow-network-fs', [CompletionResultType]::ParameterName, 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect')
            [CompletionResult]::new('-v', '-v', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('--verbose', '--verbose', [CompletionResultType]::ParameterName, 'More detail on stderr: -v lifecycle events, -vv HTTP requests')
            [CompletionResult]::new('-q', '-q', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('--quiet', '--quiet', [CompletionResultType]::ParameterName, 'Nothing on stderr but fatal errors')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'lockrun;explain;help' {
            [CompletionResult]::new('elect', 'elect', [CompletionResultType]::ParameterValue, 'Explain `lockrun elect` with these flags')
            [CompletionResult]::new('semaphore', 'semaphore', [CompletionResultType]::ParameterValue, 'Explain `lockrun semaphore` with these flags')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lockrun;explain;help;elect' {
            break
        }
        'lockrun;explain;help;semaphore' {
            break
        }
        'lockrun;explain;help;help' {
            break
        }
        'lockrun;help' {
            [CompletionResult]::new('elect', 'elect', [CompletionResultType]::ParameterValue, 'Run COMMAND while holding the leader lock on KEY')
            [CompletionResult]::new('semaphore', 'semaphore', [CompletionResultType]::ParameterValue, 'Run COMMAND while holding one of N slots of the semaphore PREFIX')
            [CompletionResult]::new('leader', 'leader', [CompletionResultType]::ParameterValue, 'Print who holds the lock on KEY (or the semaphore PREFIX)')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Force-release the lock on KEY (or semaphore slots), from any host')
            [CompletionResult]::new('completions', 'completions', [CompletionResultType]::ParameterValue, 'Print the completion script for SHELL on stdout')
            [CompletionResult]::new('man', 'man', [CompletionResultType]::ParameterValue, 'Write the man pages into DIR: lockrun(1) and one page per subcommand')
            [CompletionResult]::new('unit', 'unit', [CompletionResultType]::ParameterValue, 'Print a systemd unit that runs this lockrun: the binary''s own path')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Exit 0 while this lockrun''s lock is held with enough time left (for COMMAND)')
            [CompletionResult]::new('check', 'check', [CompletionResultType]::ParameterValue, 'Exit 0 only while the holder a sequencer names still holds its lock')
            [CompletionResult]::new('put', 'put', [CompletionResultType]::ParameterValue, 'Write KEY=VALUE into the engine only while a sequencer''s holder holds its lock')
            [CompletionResult]::new('explain', 'explain', [CompletionResultType]::ParameterValue, 'Print the timing promise that elect or semaphore would keep with these flags')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'lockrun;help;elect' {
            break
        }
        'lockrun;help;semaphore' {
            break
        }
        'lockrun;help;leader' {
            break
        }
        'lockrun;help;release' {
            break
        }
        'lockrun;help;completions' {
            break
        }
        'lockrun;help;man' {
            break
        }
        'lockrun;help;unit' {
            break
        }
        'lockrun;help;status' {
            break
        }
        'lockrun;help;check' {
            break
        }
        'lockrun;help;put' {
            break
        }
        'lockrun;help;explain' {
            [CompletionResult]::new('elect', 'elect', [CompletionResultType]::ParameterValue, 'Explain `lockrun elect` with these flags')
            [CompletionResult]::new('semaphore', 'semaphore', [CompletionResultType]::ParameterValue, 'Explain `lockrun semaphore` with these flags')
            break
        }
        'lockrun;help;explain;elect' {
            break
        }
        'lockrun;help;explain;semaphore' {
            break
        }
        'lockrun;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
