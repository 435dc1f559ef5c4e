//! Avro's binary encoding and object container file, as much of them as a manifest needs
//! (the Avro 1.11 specification, "Binary Encoding" and "Object Container Files").

/// A variable-length zig-zag `long` (`int` is encoded the same way).
pub(crate) fn long(out: &mut Vec<u8>, value: i64) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// `bytes` (and `string`): the length, then the bytes.
pub(crate) fn bytes(out: &mut Vec<u8>, value: &[u8]) {
    long(out, value.len() as i64);
    out.extend_from_slice(value);
}

/// The branch of a `["null", T]` union: 0 for null, 1 for a value (which follows).
pub(crate) fn union_branch(out: &mut Vec<u8>, present: bool) {
    out.push(if present { 2 } else { 0 });
}

/// An array of `len` items written by `item`, as one block (then the empty block that ends
/// it); an empty array is the end block alone.
pub(crate) fn array<T>(
    out: &mut Vec<u8>,
    items: impl ExactSizeIterator<Item = T>,
    mut item: impl FnMut(&mut Vec<u8>, T),
) {
    if items.len() > 0 {
        long(out, items.len() as i64);
        for i in items {
            item(out, i);
        }
    }
    out.push(0);
}

/// An object container file: the header (magic, metadata with the schema and the `null`
/// codec, sync marker), then `count` encoded objects as one block.
pub(crate) fn container(schema: &str, metadata: &[(&str, Vec<u8>)], count: u64, objects: &[u8]) -> Vec<u8> {
    let sync: [u8; 16] = *uuid::Uuid::new_v4().as_bytes();
    let mut out = Vec::with_capacity(objects.len() + schema.len() + 512);
    out.extend_from_slice(b"Obj\x01");
    long(&mut out, metadata.len() as i64 + 2);
    bytes(&mut out, b"avro.schema");
    bytes(&mut out, schema.as_bytes());
    bytes(&mut out, b"avro.codec");
    bytes(&mut out, b"null");
    for (key, value) in metadata {
        bytes(&mut out, key.as_bytes());
        bytes(&mut out, value);
    }
    out.push(0);
    out.extend_from_slice(&sync);
    if count > 0 {
        long(&mut out, count as i64);
        long(&mut out, objects.len() as i64);
        out.extend_from_slice(objects);
        out.extend_from_slice(&sync);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longs_are_zig_zag_varints() {
        let encode = |v| {
            let mut out = Vec::new();
            long(&mut out, v);
            out
        };
        // The examples of the Avro specification.
        assert_eq!(encode(0), [0x00]);
        assert_eq!(encode(-1), [0x01]);
        assert_eq!(encode(1), [0x02]);
        assert_eq!(encode(-2), [0x03]);
        assert_eq!(encode(-64), [0x7f]);
        assert_eq!(encode(64), [0x80, 0x01]);
        assert_eq!(encode(i64::MAX).len(), 10);
        assert_eq!(encode(i64::MIN).len(), 10);
    }
}
