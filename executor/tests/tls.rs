//! TLS is the `tls` feature: without it, asking for TLS is refused with a text saying so;
//! with it, the files are read (here: a missing certificate, named).

use codemode_executor::RemoteExecutor;
use codemode_executor::daemon::{Address, BindError, Daemon, DaemonConfig, TlsFiles};
use codemode_executor::tls::TlsError;

fn missing(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("codemode-tls-test-{}-{name}.pem", std::process::id()))
}

#[tokio::test]
async fn a_daemon_with_tls_files_binds_only_with_the_feature() {
    let config = DaemonConfig::new(Address::Tcp("127.0.0.1:0".to_owned()))
        .token(Some("t".to_owned()))
        .tls(Some(TlsFiles::new(missing("cert"), missing("key"))));
    let refused = Daemon::bind(config).await.err().unwrap();
    if cfg!(feature = "tls") {
        assert!(
            matches!(&refused, BindError::Tls(TlsError::Certificate { path, .. }) if *path == missing("cert"))
        );
        let refused = refused.to_string();
        assert!(
            refused.starts_with(&format!("cannot read the certificate {}: ", missing("cert").display())),
            "{refused}"
        );
    } else {
        assert!(matches!(refused, BindError::Tls(TlsError::NotBuilt)), "{refused:?}");
        assert_eq!(refused.to_string(), codemode_executor::tls::TLS_NOT_BUILT);
        assert_eq!(
            refused.to_string(),
            "TLS is not built in: enable the `tls` feature of codemode-executor (the codemode command has it)"
        );
    }
}

#[tokio::test]
async fn a_client_asking_for_tls_connects_only_with_the_feature() {
    let refused = RemoteExecutor::connect_tls("tcp:127.0.0.1:9", Some("t"), &missing("ca"), "localhost")
        .await
        .err()
        .unwrap();
    assert!(matches!(refused, codemode_executor::ConnectError::Tls(_)), "{refused:?}");
    if cfg!(feature = "tls") {
        assert!(
            refused.to_string().starts_with(&format!("cannot read the CA {}: ", missing("ca").display())),
            "{refused}"
        );
    } else {
        assert_eq!(refused.to_string(), codemode_executor::tls::TLS_NOT_BUILT);
    }
}
