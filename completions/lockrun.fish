# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_lockrun_global_optspecs
    string join \n backend= http-addr= token-file= ca-file= ca-path= client-cert= client-key= tls-server-name= datacenter= namespace= endpoints= cacert= cert= cert-key= dsn= zk-hosts= zk-auth-file= zk-ca-file= zk-client-cert= zk-client-key= lock-dir= allow-network-fs v/verbose q/quiet log-format= h/help V/version
end

function __fish_lockrun_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_lockrun_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_lockrun_using_subcommand
    set -l cmd (__fish_lockrun_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c lockrun -n "__fish_lockrun_needs_command" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_needs_command" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_needs_command" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_needs_command" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_needs_command" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_needs_command" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_needs_command" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_needs_command" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_needs_command" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_needs_command" -s V -l version -d 'Print version'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "elect" -d 'Run COMMAND while holding the leader lock on KEY'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "semaphore" -d 'Run COMMAND while holding one of N slots of the semaphore PREFIX'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "leader" -d 'Print who holds the lock on KEY (or the semaphore PREFIX)'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "list" -d 'Print every held lock and semaphore under PREFIX, with its holders'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "release" -d 'Force-release the lock on KEY (or semaphore slots), from any host'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "completions" -d 'Print the completion script for SHELL on stdout'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "man" -d 'Write the man pages into DIR: lockrun(1) and one page per subcommand'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "unit" -d 'Print a systemd unit that runs this lockrun: the binary\'s own path'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "status" -d 'Exit 0 while this lockrun\'s lock is held with enough time left (for COMMAND)'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "check" -d 'Exit 0 only while the holder a sequencer names still holds its lock'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "put" -d 'Write KEY=VALUE into the engine only while a sequencer\'s holder holds its lock'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "explain" -d 'Print the timing promise that elect or semaphore would keep with these flags'
complete -c lockrun -n "__fish_lockrun_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l priority -d 'Prefer this waiter: a free lock goes to the highest N waiting (0 to 1000, default 0)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l priority-grace -d 'How long a deferring waiter leaves a free lock to a higher one [default: 3s]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l ttl -d 'How long the engine keeps a silent holder\'s lock' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l lock-delay -d 'How long Consul keeps a lost lock from a new holder' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l behavior -d 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]' -r -f -a "release\t''
delete\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l session-name -d 'Session name shown in Consul [default: lockrun on HOST pid PID for KEY]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l node-checks -d 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l service-checks -d 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l zk-tick-time -d 'ZooKeeper: the ensemble\'s tickTime (zoo.cfg), which no client can read' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l clock-rate-error -d 'The largest combined clock-rate error the stop window allows for' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l timeout -d 'Give up after DURATION without the lock (exit 75)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -s E -l conflict-exit-code -d 'Exit status when the lock was not acquired, as flock -E' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l kill-signal -d 'Signal that asks the child to stop when the lock is lost' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l kill-timeout -d 'Grace period after the kill signal before SIGKILL' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l max-time -d 'Stop the job once it has run DURATION (exit 123)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l leftovers -d 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND\'s either way' -r -f -a "wait\t'The job lasts until the last process of COMMAND\'s tree is gone'
kill\t'What COMMAND left is stopped when COMMAND exits'"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l containment -d 'How COMMAND\'s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service\'s cgroup not delegated stays systemd\'s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree\'s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got' -r -f -a "auto\t'A cgroup of its own where possible, else the subreaper'
subreaper\t'The guard as a child subreaper alone, never a cgroup'"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l value -d 'Value stored in the lock entry [default: this host\'s name]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l notify -d 'Speak systemd\'s notify protocol (Type=notify)' -r -f -a "start\t'At once: a standby is a healthy, started service'
held\t'Only once the lock or slot is held: a standby stays "activating"'"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l min-hold -d 'Keep the lock at least DURATION after taking it' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l status-addr -d 'Serve /status, /leader and /metrics on ADDR while lockrun runs' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l on-acquire -d 'Run CMD with `sh -c` once the lock is held, before COMMAND' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l on-loss -d 'Run CMD with `sh -c` after COMMAND was stopped on a loss' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l on-release -d 'Run CMD with `sh -c` after COMMAND exited and the lock was released' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l on-jeopardy -d 'Run CMD with `sh -c` when the lease goes into jeopardy (see --warn-before)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l warn-before -d 'Warn the job when the lease has gone unconfirmed until DURATION before COMMAND\'s stop would begin' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l warn-signal -d 'Signal to COMMAND\'s tree when the lease goes into jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l warn-clear-signal -d 'Signal to COMMAND\'s tree when a renewal ends the jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l hook-timeout -d 'How long a hook may run before its whole process group is killed' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l register-service -d 'Register the holder in the Consul agent\'s catalog as service NAME (at PORT) while it holds' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l service-tag -d 'A tag of the registered service (repeatable), e.g. `primary`' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l service-agent -d 'The Consul agent to register with, HOST:PORT or http(s)://HOST:PORT [default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -s s -l shared -d 'Take the lock shared, as `flock -s`: readers run together, a writer alone'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -s x -l exclusive -d 'Take the lock exclusive: the default, spelled as `flock -x`'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l campaign -d 'After a loss, stop the child and campaign again instead of exiting 124'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l no-checks -d 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -s n -l no-wait -d 'Try once; if the lock is taken, exit 75 at once'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l replace -d 'Take the lock from its holder (a semaphore\'s oldest slot), never overlapping'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l shell -d 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand elect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -s l -l limit -d 'Number of slots; every contender on PREFIX must agree' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l ttl -d 'How long the engine keeps a silent holder\'s lock' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l lock-delay -d 'How long Consul keeps a lost lock from a new holder' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l behavior -d 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]' -r -f -a "release\t''
delete\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l session-name -d 'Session name shown in Consul [default: lockrun on HOST pid PID for KEY]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l node-checks -d 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l service-checks -d 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l zk-tick-time -d 'ZooKeeper: the ensemble\'s tickTime (zoo.cfg), which no client can read' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l clock-rate-error -d 'The largest combined clock-rate error the stop window allows for' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l timeout -d 'Give up after DURATION without the lock (exit 75)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -s E -l conflict-exit-code -d 'Exit status when the lock was not acquired, as flock -E' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l kill-signal -d 'Signal that asks the child to stop when the lock is lost' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l kill-timeout -d 'Grace period after the kill signal before SIGKILL' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l max-time -d 'Stop the job once it has run DURATION (exit 123)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l leftovers -d 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND\'s either way' -r -f -a "wait\t'The job lasts until the last process of COMMAND\'s tree is gone'
kill\t'What COMMAND left is stopped when COMMAND exits'"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l containment -d 'How COMMAND\'s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service\'s cgroup not delegated stays systemd\'s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree\'s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got' -r -f -a "auto\t'A cgroup of its own where possible, else the subreaper'
subreaper\t'The guard as a child subreaper alone, never a cgroup'"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l value -d 'Value stored in the lock entry [default: this host\'s name]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l notify -d 'Speak systemd\'s notify protocol (Type=notify)' -r -f -a "start\t'At once: a standby is a healthy, started service'
held\t'Only once the lock or slot is held: a standby stays "activating"'"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l min-hold -d 'Keep the lock at least DURATION after taking it' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l status-addr -d 'Serve /status, /leader and /metrics on ADDR while lockrun runs' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l on-acquire -d 'Run CMD with `sh -c` once the lock is held, before COMMAND' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l on-loss -d 'Run CMD with `sh -c` after COMMAND was stopped on a loss' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l on-release -d 'Run CMD with `sh -c` after COMMAND exited and the lock was released' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l on-jeopardy -d 'Run CMD with `sh -c` when the lease goes into jeopardy (see --warn-before)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l warn-before -d 'Warn the job when the lease has gone unconfirmed until DURATION before COMMAND\'s stop would begin' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l warn-signal -d 'Signal to COMMAND\'s tree when the lease goes into jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l warn-clear-signal -d 'Signal to COMMAND\'s tree when a renewal ends the jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l hook-timeout -d 'How long a hook may run before its whole process group is killed' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l register-service -d 'Register the holder in the Consul agent\'s catalog as service NAME (at PORT) while it holds' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l service-tag -d 'A tag of the registered service (repeatable), e.g. `primary`' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l service-agent -d 'The Consul agent to register with, HOST:PORT or http(s)://HOST:PORT [default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l no-checks -d 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -s n -l no-wait -d 'Try once; if the lock is taken, exit 75 at once'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l replace -d 'Take the lock from its holder (a semaphore\'s oldest slot), never overlapping'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l shell -d 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand semaphore" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l timeout -d 'With --wait: give up after DURATION (exit 1)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l json -d 'Print one JSON object, the same schema on every backend: {"key", "backend", "kind": "lock"|"semaphore", "held", "limit" (null for a lock), "holders": [...]}; with --watch, one per line. A holder is {"value", "fence", "since", "since_unix", "host", "pid", "details"}, null where the engine does not know; "fence" is the holder\'s LOCKRUN_LOCK_INDEX where it can be read back (a Consul lock\'s ModifyIndex, not its LockIndex; an etcd lockrun holder; local), else null; "details" holds the engine\'s own facts (Consul\'s entry and session). "waiters" lists lockrun\'s writers waiting for a lock, highest --priority first, each {"priority", "value", "pid"}; null for a semaphore.'
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l wait -d 'Wait until there is a holder'
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l watch -d 'Print a line at every change of holder until interrupted'
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand leader" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l json -d 'Print one JSON object per lock or semaphore, a line each, in the schema of `leader --json`. A PostgreSQL lock listed by its id has "key": null and its id under "id".'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l session -d 'Only if this session holds it (for a semaphore: free this holder\'s slot)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l destroy-session -d 'Also destroy the holder\'s session (its other locks go too, after their lock-delay)'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l all -d 'Semaphore: free every slot'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l dir -d 'Directory to write the pages into, e.g. /usr/local/share/man/man1' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand man" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l description -d 'The unit\'s Description= [default: COMMAND and the lock it runs under]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand unit" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l status-addr -d 'The endpoint to ask: HOST:PORT or a unix socket path; by default LOCKRUN_STATUS, which lockrun sets in COMMAND\'s environment' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l for -d 'Exit 0 only with at least DURATION left before COMMAND would be stopped, on top of the safety margin' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand check" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l sequencer -d 'The sequencer of the holder the write is fenced by: LOCKRUN_SEQUENCER' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand put" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l json -d 'Print one JSON object instead of text'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -f -a "elect" -d 'Explain `lockrun elect` with these flags'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -f -a "semaphore" -d 'Explain `lockrun semaphore` with these flags'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and not __fish_seen_subcommand_from elect semaphore help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l priority -d 'Prefer this waiter: a free lock goes to the highest N waiting (0 to 1000, default 0)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l priority-grace -d 'How long a deferring waiter leaves a free lock to a higher one [default: 3s]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l ttl -d 'How long the engine keeps a silent holder\'s lock' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l lock-delay -d 'How long Consul keeps a lost lock from a new holder' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l behavior -d 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]' -r -f -a "release\t''
delete\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l session-name -d 'Session name shown in Consul [default: lockrun on HOST pid PID for KEY]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l node-checks -d 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l service-checks -d 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l zk-tick-time -d 'ZooKeeper: the ensemble\'s tickTime (zoo.cfg), which no client can read' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l clock-rate-error -d 'The largest combined clock-rate error the stop window allows for' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l timeout -d 'Give up after DURATION without the lock (exit 75)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -s E -l conflict-exit-code -d 'Exit status when the lock was not acquired, as flock -E' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l kill-signal -d 'Signal that asks the child to stop when the lock is lost' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l kill-timeout -d 'Grace period after the kill signal before SIGKILL' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l max-time -d 'Stop the job once it has run DURATION (exit 123)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l leftovers -d 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND\'s either way' -r -f -a "wait\t'The job lasts until the last process of COMMAND\'s tree is gone'
kill\t'What COMMAND left is stopped when COMMAND exits'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l containment -d 'How COMMAND\'s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service\'s cgroup not delegated stays systemd\'s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree\'s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got' -r -f -a "auto\t'A cgroup of its own where possible, else the subreaper'
subreaper\t'The guard as a child subreaper alone, never a cgroup'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l value -d 'Value stored in the lock entry [default: this host\'s name]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l notify -d 'Speak systemd\'s notify protocol (Type=notify)' -r -f -a "start\t'At once: a standby is a healthy, started service'
held\t'Only once the lock or slot is held: a standby stays "activating"'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l min-hold -d 'Keep the lock at least DURATION after taking it' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l status-addr -d 'Serve /status, /leader and /metrics on ADDR while lockrun runs' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l on-acquire -d 'Run CMD with `sh -c` once the lock is held, before COMMAND' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l on-loss -d 'Run CMD with `sh -c` after COMMAND was stopped on a loss' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l on-release -d 'Run CMD with `sh -c` after COMMAND exited and the lock was released' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l on-jeopardy -d 'Run CMD with `sh -c` when the lease goes into jeopardy (see --warn-before)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l warn-before -d 'Warn the job when the lease has gone unconfirmed until DURATION before COMMAND\'s stop would begin' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l warn-signal -d 'Signal to COMMAND\'s tree when the lease goes into jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l warn-clear-signal -d 'Signal to COMMAND\'s tree when a renewal ends the jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l hook-timeout -d 'How long a hook may run before its whole process group is killed' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l register-service -d 'Register the holder in the Consul agent\'s catalog as service NAME (at PORT) while it holds' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l service-tag -d 'A tag of the registered service (repeatable), e.g. `primary`' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l service-agent -d 'The Consul agent to register with, HOST:PORT or http(s)://HOST:PORT [default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -s s -l shared -d 'Take the lock shared, as `flock -s`: readers run together, a writer alone'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -s x -l exclusive -d 'Take the lock exclusive: the default, spelled as `flock -x`'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l campaign -d 'After a loss, stop the child and campaign again instead of exiting 124'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l no-checks -d 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -s n -l no-wait -d 'Try once; if the lock is taken, exit 75 at once'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l replace -d 'Take the lock from its holder (a semaphore\'s oldest slot), never overlapping'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l shell -d 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from elect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -s l -l limit -d 'Number of slots; every contender on PREFIX must agree' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l ttl -d 'How long the engine keeps a silent holder\'s lock' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l lock-delay -d 'How long Consul keeps a lost lock from a new holder' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l behavior -d 'What Consul does with held keys when the session is invalidated [default: release for elect, delete for semaphore]' -r -f -a "release\t''
delete\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l session-name -d 'Session name shown in Consul [default: lockrun on HOST pid PID for KEY]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l node-checks -d 'Node health checks the session is bound to (comma-separated) [default: none]. A failing check ends the session at once, so the child must then be dead within the lock-delay: renewals come more often and the grace period must fit in the lock-delay. Not for semaphores' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l service-checks -d 'Service health checks the session is bound to (comma-separated; Consul 1.7 or later). As --node-checks' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l zk-tick-time -d 'ZooKeeper: the ensemble\'s tickTime (zoo.cfg), which no client can read' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l clock-rate-error -d 'The largest combined clock-rate error the stop window allows for' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l timeout -d 'Give up after DURATION without the lock (exit 75)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -s E -l conflict-exit-code -d 'Exit status when the lock was not acquired, as flock -E' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l kill-signal -d 'Signal that asks the child to stop when the lock is lost' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l kill-timeout -d 'Grace period after the kill signal before SIGKILL' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l max-time -d 'Stop the job once it has run DURATION (exit 123)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l leftovers -d 'What becomes of the processes COMMAND leaves running when it exits (a daemon it started, a background job): `wait` keeps the job, and the lock, until the last of them is gone; `kill` gives them --kill-signal, then SIGKILL after --kill-timeout. The exit status is COMMAND\'s either way' -r -f -a "wait\t'The job lasts until the last process of COMMAND\'s tree is gone'
kill\t'What COMMAND left is stopped when COMMAND exits'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l containment -d 'How COMMAND\'s process tree is kept together. `auto`: in a cgroup v2 of its own where lockrun may create one (as root, or under systemd delegation: a `Delegate=yes` unit, `systemd-run --scope -p Delegate=yes`; a service\'s cgroup not delegated stays systemd\'s), stopped at once by `cgroup.kill`; elsewhere, and after any failure, as `subreaper`: the guard, a child subreaper, finds the tree\'s processes in /proc and kills them in passes until none is left. `-v` says which mode a run got' -r -f -a "auto\t'A cgroup of its own where possible, else the subreaper'
subreaper\t'The guard as a child subreaper alone, never a cgroup'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l value -d 'Value stored in the lock entry [default: this host\'s name]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l notify -d 'Speak systemd\'s notify protocol (Type=notify)' -r -f -a "start\t'At once: a standby is a healthy, started service'
held\t'Only once the lock or slot is held: a standby stays "activating"'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l min-hold -d 'Keep the lock at least DURATION after taking it' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l status-addr -d 'Serve /status, /leader and /metrics on ADDR while lockrun runs' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l on-acquire -d 'Run CMD with `sh -c` once the lock is held, before COMMAND' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l on-loss -d 'Run CMD with `sh -c` after COMMAND was stopped on a loss' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l on-release -d 'Run CMD with `sh -c` after COMMAND exited and the lock was released' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l on-jeopardy -d 'Run CMD with `sh -c` when the lease goes into jeopardy (see --warn-before)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l warn-before -d 'Warn the job when the lease has gone unconfirmed until DURATION before COMMAND\'s stop would begin' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l warn-signal -d 'Signal to COMMAND\'s tree when the lease goes into jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l warn-clear-signal -d 'Signal to COMMAND\'s tree when a renewal ends the jeopardy [default: none]' -r -f -a "HUP\t''
INT\t''
QUIT\t''
ABRT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''
TERM\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l hook-timeout -d 'How long a hook may run before its whole process group is killed' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l register-service -d 'Register the holder in the Consul agent\'s catalog as service NAME (at PORT) while it holds' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l service-tag -d 'A tag of the registered service (repeatable), e.g. `primary`' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l service-agent -d 'The Consul agent to register with, HOST:PORT or http(s)://HOST:PORT [default: CONSUL_HTTP_ADDR, else 127.0.0.1:8500]' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l backend -d 'Where the locks live' -r -f -a "consul\t'HashiCorp Consul (sessions and KV, as `consul lock`)'
etcd\t'etcd v3 (a lease and etcd\'s own mutex layout, as `etcdctl lock`)'
local\t'This host only: `flock(2)` on a file per lock, as `flock(1)`; no server'
postgres\t'PostgreSQL (a session-level advisory lock, as `pg_advisory_lock`)'
zookeeper\t'Apache ZooKeeper (ephemeral sequential nodes in Curator\'s layout)'"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l http-addr -d 'Consul agent: host:port, http://host:port or https://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l token-file -d 'Read the ACL token from FILE' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l ca-file -d 'CA certificate file to verify Consul\'s TLS certificate' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l ca-path -d 'Directory of CA certificates' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l client-cert -d 'Client certificate for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l client-key -d 'Client key for Consul\'s verify_incoming' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l tls-server-name -d 'Server name to verify Consul\'s certificate against (SNI)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l datacenter -d 'Datacenter to use (default: the agent\'s)' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l namespace -d 'Enterprise namespace' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l endpoints -d 'etcd: endpoints, comma-separated host:port or http(s)://host:port' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l cacert -d 'etcd: CA certificate file (else ETCDCTL_CACERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l cert -d 'etcd: client certificate file (else ETCDCTL_CERT)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l cert-key -d 'etcd: the client certificate\'s key file (else ETCDCTL_KEY)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l dsn -d 'postgres: a postgres:// URL or libpq `key=value` words' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l zk-hosts -d 'ZooKeeper: connect string, comma-separated host:port, then an optional /chroot' -r
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l zk-auth-file -d 'ZooKeeper: a file holding user:password for digest authentication (else ZOOKEEPER_AUTH holds user:password)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l zk-ca-file -d 'ZooKeeper: TLS to every server (their secureClientPort), verified against the CA certificates in FILE (PEM)' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l zk-client-cert -d 'ZooKeeper: a client certificate (PEM) for servers that ask for one (ssl.clientAuth); needs --zk-ca-file and --zk-client-key' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l zk-client-key -d 'ZooKeeper: the client certificate\'s private key (PEM), with --zk-client-cert; not readable by others' -r -F
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l lock-dir -d 'local: the lock directory; KEY is the file DIR/KEY, as `flock DIR/KEY`' -r -f -a "(__fish_complete_directories)"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l log-format -d 'Format of lockrun\'s own messages on stderr' -r -f -a "text\t''
json\t''"
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l no-checks -d 'Bind the session to no health check, so that only the TTL ends it (the default; sent to Consul explicitly, old and new fields alike)'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -s n -l no-wait -d 'Try once; if the lock is taken, exit 75 at once'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l replace -d 'Take the lock from its holder (a semaphore\'s oldest slot), never overlapping'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l shell -d 'Run COMMAND with /bin/sh -c; further arguments become $1, $2, ...'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -l allow-network-fs -d 'local: accept a lock directory on NFS or CIFS, whose flock(2) may not exclude other hosts or may break on a reconnect'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -s v -l verbose -d 'More detail on stderr: -v lifecycle events, -vv HTTP requests'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -s q -l quiet -d 'Nothing on stderr but fatal errors'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from semaphore" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from help" -f -a "elect" -d 'Explain `lockrun elect` with these flags'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from help" -f -a "semaphore" -d 'Explain `lockrun semaphore` with these flags'
complete -c lockrun -n "__fish_lockrun_using_subcommand explain; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "elect" -d 'Run COMMAND while holding the leader lock on KEY'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "semaphore" -d 'Run COMMAND while holding one of N slots of the semaphore PREFIX'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "leader" -d 'Print who holds the lock on KEY (or the semaphore PREFIX)'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "list" -d 'Print every held lock and semaphore under PREFIX, with its holders'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "release" -d 'Force-release the lock on KEY (or semaphore slots), from any host'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "completions" -d 'Print the completion script for SHELL on stdout'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "man" -d 'Write the man pages into DIR: lockrun(1) and one page per subcommand'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "unit" -d 'Print a systemd unit that runs this lockrun: the binary\'s own path'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "status" -d 'Exit 0 while this lockrun\'s lock is held with enough time left (for COMMAND)'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "check" -d 'Exit 0 only while the holder a sequencer names still holds its lock'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "put" -d 'Write KEY=VALUE into the engine only while a sequencer\'s holder holds its lock'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "explain" -d 'Print the timing promise that elect or semaphore would keep with these flags'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and not __fish_seen_subcommand_from elect semaphore leader list release completions man unit status check put explain help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and __fish_seen_subcommand_from explain" -f -a "elect" -d 'Explain `lockrun elect` with these flags'
complete -c lockrun -n "__fish_lockrun_using_subcommand help; and __fish_seen_subcommand_from explain" -f -a "semaphore" -d 'Explain `lockrun semaphore` with these flags'
