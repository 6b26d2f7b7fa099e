//! The [`Loaner`]: received bulk data copied once, straight into the store.

use super::*;

/// Puts received bulk data straight into the store: one copy from the ROS
/// message, none after (a buffer loaned for the port's receivers is sent
/// by reference). Without it, the data is moved into a vector that the
/// encoder copies into the store.
#[derive(Clone)]
pub struct Loaner {
    pub encoder: Encoder,
    /// Receivers of the port the data goes to.
    pub deliveries: u32,
    /// Whether the data will be sent: a loan never sent would pin its
    /// object until the store's delivery TTL.
    pub ready: Option<std::sync::Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl Loaner {
    /// A buffer holding a copy of `bytes`: in the store when at or over
    /// the threshold, else owned.
    pub fn buffer(&self, name: &str, dtype: Dtype, shape: &[usize], bytes: &[u8]) -> Result<Buffer, ConvertError> {
        let err = |e: hprm_node::payload::PayloadError| ConvertError::shape(name, e.to_string());
        if bytes.len() < self.encoder.threshold()
            || self.deliveries == 0
            || !self.ready.as_ref().is_some_and(|ready| ready())
        {
            return Buffer::from_bytes(dtype, shape, bytes.to_vec()).map_err(err);
        }
        let mut loan = self.encoder.loan(dtype, shape, self.deliveries).map_err(err)?;
        let target = loan.as_mut_bytes();
        if target.len() != bytes.len() {
            return Err(ConvertError::shape(
                name,
                format!("{} data bytes for a {}-byte buffer", bytes.len(), target.len()),
            ));
        }
        target.copy_from_slice(bytes);
        tracing::trace!(id = %loan.id(), nbytes = bytes.len(), "bulk data copied into the store");
        loan.finish().map_err(err)
    }
}
