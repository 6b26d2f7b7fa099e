//! Runtime clock synchronization over UDP (`--clock-sync on`).
//!
//! From the start time on, every period the RTI sends each federate that
//! asked for it (a UDP port in its UDP_PORT message) a T1 datagram with the
//! RTI's physical time, waits for the federate's T3, and answers with T4 and
//! a coded probe (T4 again, sent right after, which lets the federate discard
//! rounds whose datagrams were delayed). The federate derives its clock
//! offset from these times; the RTI keeps no state about it. Federates reply
//! to the address the T1 came from.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hprm_rti::wire::{decode, encode, Limits, Message};
use tokio::net::UdpSocket;

use crate::connection::physical_now;
use crate::federation::Federation;

/// Datagrams read per federate and round while looking for its T3.
const ATTEMPTS: usize = 5;

async fn send(socket: &UdpSocket, to: SocketAddr, msg: &Message) {
    let mut b = Vec::with_capacity(9);
    encode(msg, &mut b);
    if let Err(e) = socket.send_to(&b, to).await {
        tracing::debug!(%to, error = %e, "clock sync datagram not sent");
    }
}

/// Runs rounds until every federate has left.
pub async fn run(federation: Arc<Federation>, socket: UdpSocket, period: Duration) {
    let start = loop {
        if let Some(start) = federation.start_time() {
            break start;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let until_start = start.saturating_sub(physical_now()).max(0) as u64;
    tokio::time::sleep(Duration::from_nanos(until_start)).await;
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let wait = (period / 2).max(Duration::from_millis(1));
    loop {
        tick.tick().await;
        let (targets, connected) = federation.clock_sync_targets();
        if !connected {
            return;
        }
        for (fed, addr) in targets {
            send(&socket, addr, &Message::ClockSyncT1(physical_now())).await;
            for _ in 0..ATTEMPTS {
                let mut buf = [0u8; 64];
                let Ok(Ok((n, from))) = tokio::time::timeout(wait, socket.recv_from(&mut buf)).await else { break };
                match decode(&buf[..n], &Limits::default()) {
                    Ok(Some((Message::ClockSyncT3(id), _))) if id == fed => {
                        send(&socket, addr, &Message::ClockSyncT4(physical_now())).await;
                        send(&socket, addr, &Message::ClockSyncCodedProbe(physical_now())).await;
                        break;
                    }
                    other => tracing::debug!(fed, %from, ?other, "ignoring datagram during clock sync"),
                }
            }
        }
    }
}
