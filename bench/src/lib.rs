//! What the HPRM benchmark programs (`store-bench`, `node-bench`) have in
//! common: how they summarize timings, how they print numbers in their
//! markdown reports, and the facts about the run (machine, workspace
//! revision, UTC date) that they record beside their figures.
//!
//! Each binary keeps its own measurements, report layout and JSON schema;
//! only what both compute the same way lives here, so that the two reports
//! agree on what a "p99", a "64 KB" or a "1,234" means.

pub mod date;
pub mod machine;
pub mod report;
pub mod summary;
