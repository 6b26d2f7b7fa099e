//! Why a message could not be converted or carried.

/// A conversion or ROS-side failure, as a sentence.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{type_name}: {what}")]
    Shape { type_name: String, what: String },
    #[error("{type_name}: the value does not fit the message: {source}")]
    Fields { type_name: String, source: serde_json::Error },
    #[error("{0}")]
    Ros(String),
}

impl ConvertError {
    pub fn shape(type_name: &str, what: impl Into<String>) -> ConvertError {
        ConvertError::Shape { type_name: type_name.into(), what: what.into() }
    }
}
