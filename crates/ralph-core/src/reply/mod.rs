//! What the agent said and did: the Stop payload (`event`), the transcript's
//! readers (`transcript`) and the promise found in a reply (`promise`).

pub mod event;
pub mod promise;
pub mod transcript;
