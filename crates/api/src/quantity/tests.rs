#[test]
fn storage_sizes() {
    for ok in ["10Gi", "500Mi", "1.5Ti", "1G", "1073741824"] {
        assert!(super::is_storage_quantity(ok), "{ok}");
    }
    for bad in ["", "Gi", "ten gigs", "10 Gi", "-1Gi", "0", "1.Gi", "10GB"] {
        assert!(!super::is_storage_quantity(bad), "{bad}");
        assert_eq!(super::quantity_bytes(bad), None, "{bad}");
    }
    assert_eq!(super::quantity_bytes("10Gi"), Some(10 << 30));
    assert_eq!(super::quantity_bytes("1.5Ti"), Some(3 << 39));
    assert_eq!(super::quantity_bytes("500M"), Some(500_000_000));
    assert_eq!(super::quantity_bytes("1073741824"), Some(1 << 30));
}
