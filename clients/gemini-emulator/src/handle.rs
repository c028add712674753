//! The emulator kit's view of this emulator: the state (`service`)
//! answering through its routes (`routes`). Kept apart so that the state
//! does not reach up into the HTTP handlers that read it.

emulator_kit::service_handle!("gemini emulator");
