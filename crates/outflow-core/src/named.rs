//! Enums that users write by name in job files, flags and serialized options.
//!
//! Each enum has one canonical `snake_case` spelling (what it serializes to) and accepts the
//! spellings users bring from Beam, Flink and the command line: `CREATE_IF_NEEDED`,
//! `CreateIfNeeded`, `create-if-needed` and `create_if_needed` all read the same, as do any
//! extra aliases the enum declares (such as `field-addition`).

/// Folds a name to its comparison key: lowercase, with `_`, `-` and spaces dropped.
pub(crate) fn fold_name(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '_' | '-' | ' '))
        .flat_map(char::to_lowercase)
        .collect()
}

/// Declares an enum readable by name, with `Display`, `FromStr`, `Serialize` and
/// `Deserialize` built from one table of variants, canonical names and aliases.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident = $canonical:literal $(| $alias:literal)*
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $(
                $(#[$vmeta])*
                $variant,
            )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The canonical name, as serialized.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $canonical,)+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::Error;

            fn from_str(s: &str) -> ::std::result::Result<Self, Self::Err> {
                let folded = $crate::named::fold_name(s);
                $(
                    if folded == $crate::named::fold_name($canonical)
                        $(|| folded == $crate::named::fold_name($alias))*
                    {
                        return Ok($name::$variant);
                    }
                )+
                Err($crate::Error::invalid_config(
                    stringify!($name),
                    format!(
                        "unknown value {:?}; expected one of {}",
                        s,
                        [$($canonical),+].join(", ")
                    ),
                ))
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> ::std::result::Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(d: D) -> ::std::result::Result<Self, D::Error> {
                let s = <::std::borrow::Cow<'de, str> as ::serde::Deserialize>::deserialize(d)?;
                s.parse().map_err(|e: $crate::Error| ::serde::de::Error::custom(e.message()))
            }
        }
    };
}

pub(crate) use named_enum;

#[cfg(test)]
mod tests {
    use super::fold_name;

    #[test]
    fn folding_ignores_case_and_separators() {
        assert_eq!(fold_name("CREATE_IF_NEEDED"), "createifneeded");
        assert_eq!(fold_name("CreateIfNeeded"), "createifneeded");
        assert_eq!(fold_name("create-if-needed"), "createifneeded");
    }
}
