//! The application library of nats-cutover (publishers and workers that follow
//! a migration). Grows with the engine; see ARCHITECTURE.md.
