//! Tests that drive the model through a mini-driver, as a driver would.

mod control;
mod datapath;
mod hostile;
mod inline;
mod minidrv;
