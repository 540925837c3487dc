//! `--backend zookeeper` end to end beside Curator and kazoo, and its faults.
