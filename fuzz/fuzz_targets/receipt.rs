//! Receipts on arbitrary bytes, at both layers: the file (`Receipt::parse`: envelope, type,
//! Statement) and the Statement alone (`ReceiptStatement::from_bytes`, reached directly because
//! base64 makes it hard to reach through the envelope). Never panics; what is accepted is
//! canonical and round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runner::trust::receipt::{Receipt, ReceiptStatement};

fuzz_target!(|data: &[u8]| {
    if let Ok(receipt) = Receipt::parse(data) {
        let encoded = receipt.envelope.to_bytes();
        assert!(encoded == data || encoded.strip_suffix(b"\n") == Some(data));
        let again = Receipt::parse(&encoded).expect("re-encoded receipt parses");
        assert_eq!(again.statement, receipt.statement);
    }
    if let Ok(statement) = ReceiptStatement::from_bytes(data) {
        let encoded = statement.to_bytes().expect("accepted statement encodes");
        assert_eq!(encoded, data);
        assert_eq!(
            ReceiptStatement::from_bytes(&encoded).ok().as_ref(),
            Some(&statement)
        );
    }
});
