//! lockrun and the engine's own tool (`Place::peer_hold`: flock(1),
//! `consul lock`, `etcdctl lock`, psql's `pg_advisory_lock`, kazoo) exclude
//! each other both ways, by the children's own timestamps.

use crate::places::{on_every_engine, Place};
use crate::procs::{deadline, wait_until};
use crate::support::{max_overlap, Contender};

/// Lets `holder` beat 30 more times (about 300 ms of its own time), in
/// which a rival that ignored its hold would have started.
fn while_it_holds(holder: &Contender) {
    let beats = holder.beats().len();
    let more = wait_until(deadline(), || holder.beats().len() >= beats + 30);
    assert!(more, "the holder stopped beating");
}

/// `first` holds, `second` waits for it and holds once it is done; their
/// spans never overlap and both exit 0.
fn one_after_the_other(place: &Place, mut first: Contender, mut second: Contender, what: &str) {
    first.wait_started(&format!("{what}: the first"));
    while_it_holds(&first);
    assert!(
        !second.started(),
        "{what}: the second held beside the first"
    );
    first.go();
    second.wait_started(&format!("{what}: the second"));
    second.go();
    place.status(&first.finish(), 0, &format!("{what}: the first"));
    place.status(&second.finish(), 0, &format!("{what}: the second"));
    let spans = [first.span(), second.span()];
    assert_eq!(
        max_overlap(spans),
        1,
        "{what}: both held at once: {spans:?}"
    );
}

fn the_engines_own_tool_and_lockrun_exclude_each_other(place: &Place) {
    let key = place.peer_key("peer");
    let lockrun = || Contender::lockrun(place.lockrun(&["elect", &key]));
    let ours = lockrun();
    ours.wait_started("lockrun");
    let Some(peer) = place.peer_hold(&key) else {
        eprintln!("the engine's own tool is not here: lockrun alone ran");
        ours.go();
        return;
    };
    one_after_the_other(place, ours, peer, "lockrun first");
    let peer = place.peer_hold(&key).expect("the tool, again");
    peer.wait_started("the engine's tool");
    one_after_the_other(place, peer, lockrun(), "the engine's tool first");
}
on_every_engine!(the_engines_own_tool_and_lockrun_exclude_each_other);
