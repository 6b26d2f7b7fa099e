//! Messages from ROS 2 that the bridge could not decode, counted by
//! topic: none is dropped with only a log line.
//!
//! Two places drop one. Converting a message to its port value on the ROS
//! thread ([`crate::ros`]), and, when the program is recorded (or
//! replayed), decoding the CDR bytes ROS delivered in the port's reaction
//! ([`crate::federate`]): those are bytes as a publisher sent them, which
//! ROS does not check against the type. The reaction also counts each one
//! as the runtime counts its losses (`undecodable`, under the bridge's
//! output port: the federate's exit summary and `hprm ps`); the ROS
//! thread cannot reach those counts. The bridge's own summary when it
//! stops ([`summary`]) has both.
//!
//! What never reaches the bridge is not here: a message ROS itself cannot
//! deserialize for a typed subscription is dropped inside rmw/r2r.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::messages::ConvertError;

/// One ros->hprm topic's count.
pub struct Dropped {
    topic: String,
    type_name: String,
    count: AtomicU64,
}

impl Dropped {
    pub fn new(topic: &str, type_name: &str) -> Dropped {
        Dropped { topic: topic.to_string(), type_name: type_name.to_string(), count: AtomicU64::new(0) }
    }

    /// Counts one message dropped for `e`, and logs it with the count so far.
    pub fn drop_one(&self, e: &ConvertError) {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(topic = %self.topic, dropped = n, "dropped a message that could not be decoded as {}: {e}", self.type_name);
    }

    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }
}

/// The bridge's end-of-run line: what each topic dropped (by topic name),
/// or that none did. Counts are read once, so the total is their sum.
pub fn summary<'a>(topics: impl IntoIterator<Item = &'a Dropped>) -> String {
    let mut counts: Vec<(&Dropped, u64)> = topics.into_iter().map(|d| (d, d.count())).filter(|(_, n)| *n > 0).collect();
    counts.sort_by(|a, b| a.0.topic.cmp(&b.0.topic));
    if counts.is_empty() {
        return "no ROS 2 messages dropped".to_string();
    }
    let total: u64 = counts.iter().map(|(_, n)| n).sum();
    let by_topic: Vec<String> =
        counts.iter().map(|(d, n)| format!("{}: {n} undecodable ({})", d.topic, d.type_name)).collect();
    format!("{total} ROS 2 message(s) dropped: {}", by_topic.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_each_topic_that_dropped_and_the_total() {
        let (imu, chatter) =
            (Dropped::new("/imu", "sensor_msgs/msg/Imu"), Dropped::new("/chatter", "std_msgs/msg/String"));
        assert_eq!(summary([&imu, &chatter]), "no ROS 2 messages dropped");
        let e = || ConvertError::Ros("truncated".into());
        imu.drop_one(&e());
        imu.drop_one(&e());
        assert_eq!(summary([&imu, &chatter]), "2 ROS 2 message(s) dropped: /imu: 2 undecodable (sensor_msgs/msg/Imu)");
        chatter.drop_one(&e());
        assert_eq!(
            summary([&imu, &chatter]),
            "3 ROS 2 message(s) dropped: /chatter: 1 undecodable (std_msgs/msg/String); /imu: 2 undecodable (sensor_msgs/msg/Imu)"
        );
    }
}
