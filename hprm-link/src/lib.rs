//! # hprm-link: one host's store, linked to the other hosts' stores
//!
//! A program may span hosts; each host runs its own `hprm-store`, and a
//! receiver always reads a value's buffers from its own host's store,
//! zero-copy, exactly as when sender and receiver share a host. The link
//! is what makes that true: a daemon per host, a client of its host's
//! store and a Zenoh peer of the other hosts' links (explicit endpoints,
//! no multicast), that copies store objects between the stores.
//!
//! The data path (eager push):
//!
//! 1. A federate sends a value whose buffers went into its store. Right
//!    after encoding it (the objects are sealed), it sends a
//!    [`PushRequest`] to its host's link over the link's Unix socket (see
//!    `hprm_node::hosts`, where that layout lives), naming the object ids
//!    and every other host with receivers of that output, with how many
//!    receivers each. The descriptor meanwhile goes through the RTI or a
//!    peer connection, as on one host.
//! 2. The link takes one store reference per destination host as it
//!    queues each push (so the store's delivery TTL cannot free the object
//!    while the push waits its turn) and pushes the object to each host in
//!    parallel: one transfer per host, however many receivers it has there
//!    ([`wire`]: a Zenoh query on the host's push key, the data as
//!    payload).
//! 3. The receiving host's link creates the object in its store under the
//!    same id, with one delivery per local receiver, and replies. The
//!    receivers' decoders, which found the descriptor naming another
//!    store's arena, were waiting for that id in their own store: they get
//!    it, and each one's release settles its delivery.
//! 4. On the reply, the sending link keeps its reference for as long as
//!    that host's copy lives: the receiving link watches its store for the
//!    copies it made being freed (its receivers done) and tells the home
//!    link ([`wire::Released`]), which then releases it, settling the
//!    delivery the sender counted for that host. So the home object stays
//!    pinned until every remote copy made from it is freed, and an echo
//!    (a remote receiver sending the value back, or on to another host
//!    that had it) always finds it there. The references kept this way
//!    are the store's ordinary ones, under its budget; they are released
//!    early (always safe: an echo then carries its data) when the host is
//!    lost, when its link restarts, and past a bound (4096 objects or a
//!    quarter of the store's arena). See `Lent` in `daemon.rs` for the
//!    invariant and why this rather than a window after the push.
//! 5. Fetch on demand, the fallback: a push that is dropped by its queue
//!    or fails (a silent host, a host whose link is not up) keeps its
//!    reference for the fetch window (`--fetch-window`) and tells that host
//!    ([`wire::Dropped`]). A receiver there that finds nothing after a
//!    first short wait asks its own link (`hprm_node::hosts::FetchRequest`,
//!    on the same socket), which asks the home host, found by the arena its
//!    descriptor names ([`wire::Fetch`]): the reply carries the data (stored
//!    as a push's, with the receivers' deliveries; the kept reference is
//!    released, settling that host's delivery), or says the push is still
//!    on its way, or that the object is gone, which the receiver counts as
//!    the value lost at once, with that reason. Kept references not fetched
//!    are released when the window ends. A refused host is not kept for.
//!    A push whose object its store freed before it was queued (its
//!    request waited for room past the delivery TTL) has nothing to keep:
//!    the host is told all the same, and the home link answers a fetch of
//!    it with why, for the fetch window.
//!
//! Every push carries a token naming it ([`wire::Header::token`]): a
//! receiving link adds one push's deliveries once, whether it came by push,
//! by fetch, or both (a push counted failed by its timeout that arrived
//! after all).
//!
//! Duplicates cost no transfer: a host that already has the id (an echo
//! of a value back to its home host, a second push) adds the deliveries to
//! its copy instead. A link announces without data an object it received
//! from that host or whose copy there it still keeps its reference for;
//! a push of an object whose data push to the same host is on the wire
//! waits for that one, then announces. Only if that host no longer has it
//! does the data follow, once however many pushes found it missing.
//!
//! Flow control: pushes to each host go through a bounded queue with the
//! store's backpressure policies ([`queue`]); probes and announces travel
//! at higher Zenoh priorities than bulk data, so they never wait behind it
//! in Zenoh's queues. On the wire they may (the socket's buffer and the
//! qdisc are FIFOs), which is why a host is alive while its data arrives,
//! however late its probes' answers (the liveness rule: `liveness`).
//!
//! Status: given the program's runtime directory (`--runtime-dir`, which
//! `hprm launch --host` passes), a link publishes its host's share of the
//! program once a status period and mirrors the other hosts' into that
//! directory (`hprm_node::status`, [`wire::status_key`]), so `hprm ps` and
//! the dashboard on any host list every host's federates.
//!
//! On the wire: the link's connections carry a DSCP, AF11 by default
//! ([`marks`], `--dscp`), so that queues that honour it (Linux's
//! pfifo_fast bands, DSCP-aware switches, Wi-Fi access categories) let the
//! RTI's and the peers' small messages pass the link's bulk data.
//!
//! Security: with [`Tls`] the links speak TLS with mutual authentication
//! (Zenoh's `tls/` endpoints): each presents its host's certificate and
//! accepts only peers whose certificate the program's CA signed.
//!
//! Main types: [`Link`] (the daemon: [`Link::start`], [`Link::serve`]),
//! [`LinkConfig`], [`LinkError`]; [`wire`] (the host-to-host protocol).

mod daemon;
mod error;
mod liveness;
pub mod marks;
pub mod queue;
pub mod wire;

pub use daemon::{Link, LinkConfig, Tls, DEFAULT_FETCH_WINDOW};
pub use error::LinkError;
pub use hprm_node::hosts::PushRequest;
pub use marks::DEFAULT_DSCP;
