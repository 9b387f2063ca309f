//! Binary values and their tag: `{"__executor_binary_v1__":"<Kind>","data":"<base64>"}`.
//!
//! JSON has no bytes, so every ArrayBuffer and typed array crosses a tool call as this
//! tag and is rebuilt as the same kind on the far side. [`Binary`] is any kind;
//! [`Bytes`] is the common case, a `Uint8Array`. Both serialize as the tag and
//! deserialize only from a well-formed tag, so a struct field typed `Bytes` rebuilds
//! bytes with no one touching the shape.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::codec::CodecError;
use crate::texts;

/// The key that marks an object as a binary tag.
pub const BINARY_TAG: &str = "__executor_binary_v1__";

/// The field of a binary tag that carries the base64 of its bytes.
pub const BINARY_DATA: &str = "data";

macro_rules! binary_kinds {
    ($($kind:ident = $size:literal),* $(,)?) => {
        /// Every binary kind the engines have: ArrayBuffer and each typed array.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum BinaryKind {
            $(
                #[doc = concat!("`", stringify!($kind), "`, ", stringify!($size), " byte(s) per element.")]
                $kind,
            )*
        }

        impl BinaryKind {
            /// All kinds, in the order the guide and the codec list them.
            pub const ALL: &'static [BinaryKind] = &[$(BinaryKind::$kind),*];

            /// The JavaScript constructor name, as the tag writes it.
            pub const fn name(self) -> &'static str {
                match self { $(BinaryKind::$kind => stringify!($kind)),* }
            }

            /// Bytes per element (1 for ArrayBuffer).
            pub const fn element_size(self) -> usize {
                match self { $(BinaryKind::$kind => $size),* }
            }
        }
    };
}

binary_kinds! {
    ArrayBuffer = 1,
    Uint8Array = 1,
    Uint8ClampedArray = 1,
    Int8Array = 1,
    Uint16Array = 2,
    Int16Array = 2,
    Uint32Array = 4,
    Int32Array = 4,
    Float32Array = 4,
    Float64Array = 8,
    BigInt64Array = 8,
    BigUint64Array = 8,
}

impl BinaryKind {
    /// The kind a tag names, if the codec knows it.
    pub fn from_name(name: &str) -> Option<BinaryKind> {
        BinaryKind::ALL.iter().copied().find(|kind| kind.name() == name)
    }
}

impl fmt::Display for BinaryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An ArrayBuffer or typed array: its kind and its bytes, little-endian.
///
/// The byte count is always a whole number of elements of the kind.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Binary {
    kind: BinaryKind,
    bytes: Vec<u8>,
}

impl Binary {
    /// A binary value of `kind` over `bytes` (little-endian element order).
    ///
    /// Fails when the byte count is not a whole number of elements.
    pub fn new(kind: BinaryKind, bytes: Vec<u8>) -> Result<Binary, CodecError> {
        if !bytes.len().is_multiple_of(kind.element_size()) {
            return Err(CodecError::new(texts::BINARY_TAG_BAD_LENGTH.fill(&[
                kind.name(),
                &bytes.len().to_string(),
                &kind.element_size().to_string(),
            ])));
        }
        Ok(Binary { kind, bytes })
    }

    /// A `Uint8Array` over `bytes`.
    pub fn uint8_array(bytes: impl Into<Vec<u8>>) -> Binary {
        Binary { kind: BinaryKind::Uint8Array, bytes: bytes.into() }
    }

    /// Rebuild a binary value from the two fields of its tag.
    pub fn from_tag(kind: &str, data: &str) -> Result<Binary, CodecError> {
        let kind = BinaryKind::from_name(kind)
            .ok_or_else(|| CodecError::new(texts::BINARY_TAG_UNKNOWN_KIND.fill(&[kind])))?;
        let bytes = STANDARD
            .decode(data)
            .map_err(|_| CodecError::new(texts::BINARY_TAG_BAD_BASE64.fill(&[kind.name()])))?;
        Binary::new(kind, bytes)
    }

    /// The kind it is rebuilt as on the far side.
    pub fn kind(&self) -> BinaryKind {
        self.kind
    }

    /// Its bytes, little-endian.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its bytes, taken out.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The standard padded base64 of its bytes, as the tag's `data` carries it.
    pub fn to_base64(&self) -> String {
        STANDARD.encode(&self.bytes)
    }
}

impl fmt::Debug for Binary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({} bytes)", self.kind, self.bytes.len())
    }
}

impl From<Bytes> for Binary {
    fn from(bytes: Bytes) -> Binary {
        Binary::uint8_array(bytes.0)
    }
}

impl Serialize for Binary {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_tag(self.kind, &self.bytes, serializer)
    }
}

impl<'de> Deserialize<'de> for Binary {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Binary, D::Error> {
        deserializer.deserialize_map(TagVisitor)
    }
}

fn serialize_tag<S: Serializer>(kind: BinaryKind, bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(2))?;
    map.serialize_entry(BINARY_TAG, kind.name())?;
    map.serialize_entry(BINARY_DATA, &STANDARD.encode(bytes))?;
    map.end()
}

struct TagVisitor;

impl<'de> Visitor<'de> for TagVisitor {
    type Value = Binary;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A program reads this when it passes something else where a tool takes bytes.
        f.write_str("bytes (a Uint8Array, an ArrayBuffer or another typed array)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Binary, A::Error> {
        let mut kind: Option<String> = None;
        let mut data: Option<String> = None;
        while let Some(key) = map.next_key::<String>()? {
            let slot = match key.as_str() {
                BINARY_TAG => &mut kind,
                BINARY_DATA => &mut data,
                _ => return Err(de::Error::custom(texts::BINARY_TAG_SHAPE)),
            };
            *slot = Some(map.next_value::<String>().map_err(|_| de::Error::custom(texts::BINARY_TAG_SHAPE))?);
        }
        match (kind, data) {
            (Some(kind), Some(data)) => Binary::from_tag(&kind, &data).map_err(de::Error::custom),
            _ => Err(de::Error::custom(texts::BINARY_TAG_SHAPE)),
        }
    }
}

/// Bytes that cross as a `Uint8Array`: the way to send real bytes.
///
/// `Vec<u8>` is not: serde writes it as an array of numbers, which reaches the
/// program as an ordinary array (the Rust twin of the guide's Buffer trap). Wrap it
/// once, `Bytes::from(vec)`, and the codec tags it.
///
/// Deserializing accepts a tag of any binary kind and keeps its bytes, so a program
/// may send an ArrayBuffer or any typed array where a tool takes `Bytes`.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bytes(pub Vec<u8>);

impl Bytes {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.0
    }

    /// The bytes, taken out.
    pub fn into_vec(self) -> Vec<u8> {
        self.0
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bytes({} bytes)", self.0.len())
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(bytes: Vec<u8>) -> Bytes {
        Bytes(bytes)
    }
}

impl From<&[u8]> for Bytes {
    fn from(bytes: &[u8]) -> Bytes {
        Bytes(bytes.to_vec())
    }
}

impl<const N: usize> From<[u8; N]> for Bytes {
    fn from(bytes: [u8; N]) -> Bytes {
        Bytes(bytes.to_vec())
    }
}

impl From<Binary> for Bytes {
    fn from(binary: Binary) -> Bytes {
        Bytes(binary.bytes)
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl schemars::JsonSchema for Bytes {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Bytes".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Bytes as the binary tag: {\"__executor_binary_v1__\": \"Uint8Array\", \"data\": standard base64}.",
            "type": "object",
            "properties": {
                "__executor_binary_v1__": { "const": "Uint8Array" },
                "data": { "type": "string" }
            },
            "required": ["__executor_binary_v1__", "data"],
            "additionalProperties": false
        })
    }
}

impl Serialize for Bytes {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_tag(BinaryKind::Uint8Array, &self.0, serializer)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        Binary::deserialize(deserializer).map(Bytes::from)
    }
}
