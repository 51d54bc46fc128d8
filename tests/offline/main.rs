//! The tests that need neither root nor a kernel: the model, topology, configuration and
//! kubeconfig, the manifests watcher, the API reflectors' WatchList, the sync loop through the in-memory `Kernel`, the golden
//! dry runs and their incremental replays, and the debug views as data. One binary, so the
//! crate is linked once for all of them.

#[path = "../common/mod.rs"]
mod common;

mod api_answers;
mod config;
mod debug_view;
mod dispatch;
mod golden;
mod incremental;
mod kubeconfig;
mod local_view;
mod manifests;
mod model;
mod sync_loop;
mod topology;
mod watch_list;
mod watcher;
