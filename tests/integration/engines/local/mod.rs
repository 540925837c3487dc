//! The local backend: flock(2) in a lock directory, beside flock(1).

// `--backend local` end to end, beside real flock(1).
mod cli;
// The `local` backend's engine through the backend seam.
mod engine;
// The local lock directory against another user's links, FIFOs and files.
mod hostile;
