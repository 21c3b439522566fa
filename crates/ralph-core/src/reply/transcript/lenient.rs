//! The parts of a transcript line's `content` that the forward scan uses,
//! read without building a `serde_json::Value`: anything of another shape
//! than expected reads as absent instead of failing the line (as a lookup
//! in a `Value` would), and whatever is not named is skipped as it is
//! parsed, so it costs no memory.

use std::fmt;
use std::marker::PhantomData;

use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The visitor methods for the values a lenient type does not take: each
/// is skipped and reads as the type's default.
macro_rules! anything_else_is_default {
    () => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

macro_rules! strings_are_default {
    () => {
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

macro_rules! maps_are_default {
    () => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

macro_rules! seqs_are_default {
    () => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

/// A string, or `None` for any other value.
#[derive(Debug, Default)]
pub(super) struct Str(pub Option<String>);

impl<'de> Deserialize<'de> for Str {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_str<E>(self, s: &str) -> Result<Str, E> {
                Ok(Str(Some(s.to_owned())))
            }
            fn visit_string<E>(self, s: String) -> Result<Str, E> {
                Ok(Str(Some(s)))
            }
            anything_else_is_default!();
            maps_are_default!();
            seqs_are_default!();
        }
        d.deserialize_any(V)
    }
}

/// A boolean, or `None` for any other value.
#[derive(Debug, Default)]
pub(super) struct Bool(pub Option<bool>);

impl<'de> Deserialize<'de> for Bool {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Bool;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_bool<E>(self, b: bool) -> Result<Bool, E> {
                Ok(Bool(Some(b)))
            }
            fn visit_i64<E>(self, _: i64) -> Result<Bool, E> {
                Ok(Bool(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<Bool, E> {
                Ok(Bool(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<Bool, E> {
                Ok(Bool(None))
            }
            fn visit_unit<E>(self) -> Result<Bool, E> {
                Ok(Bool(None))
            }
            fn visit_none<E>(self) -> Result<Bool, E> {
                Ok(Bool(None))
            }
            strings_are_default!();
            maps_are_default!();
            seqs_are_default!();
        }
        d.deserialize_any(V)
    }
}

/// What a block's `text` is read as: kept ([`Str`]) or skipped
/// ([`IgnoredAny`], for a line too long to keep).
pub(super) trait Text {
    /// Whether the text is kept at all.
    const KEPT: bool;
    fn text(&self) -> Option<&str>;
}

impl Text for Str {
    const KEPT: bool = true;
    fn text(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl Text for IgnoredAny {
    const KEPT: bool = false;
    fn text(&self) -> Option<&str> {
        None
    }
}

/// One content block: the fields the scan looks at, each lenient.
#[derive(Debug, serde::Deserialize)]
pub(super) struct Block<T> {
    #[serde(rename = "type", default)]
    pub kind: Str,
    #[serde(default)]
    pub name: Str,
    #[serde(default)]
    pub id: Str,
    #[serde(default)]
    pub tool_use_id: Str,
    #[serde(default)]
    pub is_error: Bool,
    pub text: Option<T>,
}

impl<T> Block<T> {
    pub(super) fn is(&self, kind: &str) -> bool {
        self.kind.0.as_deref() == Some(kind)
    }
}

/// A message's content: its blocks when it is an array (elements that are
/// not objects are skipped), none for anything else (a plain string).
#[derive(Debug)]
pub(super) struct Content<T>(pub Vec<Block<T>>);

impl<T> Content<T> {
    /// No blocks (a message without content).
    pub(super) fn none() -> Self {
        Self(Vec::new())
    }
}

impl<T> Default for Content<T> {
    fn default() -> Self {
        Self::none()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Content<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Content<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content<T>, A::Error> {
                let mut blocks = Vec::new();
                while let Some(MaybeBlock(block)) = seq.next_element::<MaybeBlock<T>>()? {
                    blocks.extend(block);
                }
                Ok(Content(blocks))
            }
            anything_else_is_default!();
            strings_are_default!();
            maps_are_default!();
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// An array element: a block when it is an object.
struct MaybeBlock<T>(Option<Block<T>>);

impl<T> Default for MaybeBlock<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for MaybeBlock<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = MaybeBlock<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<MaybeBlock<T>, A::Error> {
                Block::deserialize(MapAccessDeserializer::new(map)).map(|b| MaybeBlock(Some(b)))
            }
            anything_else_is_default!();
            strings_are_default!();
            seqs_are_default!();
        }
        d.deserialize_any(V(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_shapes_read_as_absent_not_as_errors() {
        let c: Content<Str> = serde_json::from_str(
            r#"[1, "x", null, [2], {"type": 3, "name": {"a": [1]}, "id": "t", "is_error": "yes", "text": ["x"]},
                {"type": "text", "text": "hi", "input": {"deep": [1, 2, {"x": "y"}]}}]"#,
        )
        .unwrap();
        assert_eq!(c.0.len(), 2);
        assert_eq!(
            (c.0[0].kind.0.as_deref(), c.0[0].name.0.as_deref()),
            (None, None)
        );
        assert_eq!(
            (c.0[0].id.0.as_deref(), c.0[0].is_error.0),
            (Some("t"), None)
        );
        assert!(c.0[1].is("text"));
        assert_eq!(c.0[1].text.as_ref().and_then(Text::text), Some("hi"));
        for other in [r#""a prompt""#, "3", "null", r#"{"a": 1}"#, "true"] {
            let c: Content<Str> = serde_json::from_str(other).unwrap();
            assert!(c.0.is_empty(), "{other}");
        }
    }
}
