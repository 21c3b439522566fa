//! `ralph run --sandbox`: the loop's sandbox setting as its file records
//! it (`sandbox: true`, `sandbox_network: none`, `sandbox_image: IMG`),
//! bound by the arming record like every other setting, and the words
//! that say what a sandboxed agent may reach. Which tool confines it
//! (bubblewrap, `sandbox-exec`, a container engine) is chosen when the
//! agent starts (`run/sandbox/`).

use crate::fields::values::StateError;

/// Where a sandboxed agent may connect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// The internet, not the host: a network namespace of its own given a
    /// user-mode network (pasta) that reaches out through
    /// the host's sockets but not the host's loopback, its ports or its
    /// abstract sockets. Where neither tool is installed, the host's network.
    #[default]
    Internet,
    /// Nowhere: its own loopback only.
    None,
    /// The host's own network: its loopback and abstract sockets too.
    Host,
}

impl Network {
    /// `internet`, `none` or `host`, as the flag and the file spell them
    /// (`open`, the old name of the default, is read as `internet`).
    pub fn parse(value: &str) -> Option<Self> {
        match value.trim() {
            "internet" | "open" => Some(Self::Internet),
            "none" => Some(Self::None),
            "host" => Some(Self::Host),
            _ => None,
        }
    }

    pub fn word(self) -> &'static str {
        match self {
            Self::Internet => "internet",
            Self::None => "none",
            Self::Host => "host",
        }
    }

    /// How much it reaches, to keep the least of two.
    fn reach_rank(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Internet => 1,
            Self::Host => 2,
        }
    }
}

/// A loop's sandbox: every agent process of `ralph run` runs confined.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confinement {
    pub network: Network,
    /// `--sandbox-image`: the agent runs in a container of this image
    /// (Docker or Podman); `None`: bubblewrap on Linux, `sandbox-exec` on macOS.
    pub image: Option<String>,
}

/// Whether `image` can be handed to `docker run` as an image and never
/// read as an option or as two words: letters, digits and `._/:@-`, not
/// starting with `-`, at most 255 characters.
pub fn valid_image(image: &str) -> bool {
    !image.is_empty()
        && image.len() <= 255
        && !image.starts_with('-')
        && image
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._/:@-".contains(c))
}

impl Confinement {
    /// The setting from its three fields (`None`: the loop is not sandboxed).
    pub(crate) fn from_fields(
        sandbox: bool,
        network: Option<&str>,
        image: Option<&str>,
    ) -> Result<Option<Self>, StateError> {
        if !sandbox {
            return Ok(None);
        }
        let network = match network.map(str::trim).filter(|v| !v.is_empty()) {
            None => Network::Internet,
            Some(v) => Network::parse(v).ok_or_else(|| StateError::Field {
                field: "sandbox_network",
                value: ralph_fs::display::line(v).into_owned(),
                expected: "expected `internet`, `none` or `host`",
            })?,
        };
        let image = match image.map(str::trim).filter(|v| !v.is_empty()) {
            None => None,
            Some(v) if valid_image(v) => Some(v.to_owned()),
            Some(v) => {
                return Err(StateError::Field {
                    field: "sandbox_image",
                    value: ralph_fs::display::line(v).into_owned(),
                    expected: "expected an image name such as node:22 or ghcr.io/org/img@sha256:… (letters, digits and ._/:@-)",
                });
            }
        };
        Ok(Some(Self { network, image }))
    }

    /// The fields a new loop file gets, in order.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![("sandbox", "true".to_owned())];
        if self.network != Network::Internet {
            out.push(("sandbox_network", self.network.word().to_owned()));
        }
        if let Some(image) = &self.image {
            out.push(("sandbox_image", crate::fields::frontmatter::quote(image)));
        }
        out
    }

    /// This setting with `other`'s wherever `other` is stricter: a run's
    /// `--sandbox-network none` closes the network of a loop armed with the
    /// internet, and `internet` takes the host away from one armed `host`.
    #[must_use]
    pub fn strictest(&self, other: &Self) -> Self {
        Self {
            network: if other.network.reach_rank() < self.network.reach_rank() {
                other.network
            } else {
                self.network
            },
            image: self.image.clone().or_else(|| other.image.clone()),
        }
    }

    /// What the agent may reach, in one line (for `ralph status`).
    pub fn reach(&self) -> String {
        let tool = match &self.image {
            Some(image) => format!("a container of {image} (docker or podman)"),
            None => "bubblewrap on Linux, sandbox-exec on macOS".to_owned(),
        };
        format!("{tool}; {}", self.limits())
    }

    /// What the agent may and may not reach, whatever the tool.
    pub fn limits(&self) -> String {
        let network = match self.network {
            Network::Internet => {
                "the internet but not this machine's loopback, ports or abstract sockets, but for ralph's meter of its model's calls (where pasta is installed; else the host's network)"
            }
            Network::None => "no network",
            Network::Host => "the host's network, its loopback and abstract sockets too",
        };
        format!(
            "the agent writes only the project and its own settings (~/.claude, ~/.codex, ~/.gemini, ~/.copilot), reads the system and toolchains, cannot see the rest of your home or ralph's records; {network}; the gate runs in a sandbox of its own"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_back_and_bad_values_are_refused() {
        let conf = Confinement {
            network: Network::None,
            image: Some("node:22".into()),
        };
        let fields = conf.fields();
        let get = |k: &str| {
            fields
                .iter()
                .find(|(f, _)| *f == k)
                .map(|(_, v)| v.trim_matches('"').to_owned())
        };
        assert_eq!(
            Confinement::from_fields(
                true,
                get("sandbox_network").as_deref(),
                get("sandbox_image").as_deref()
            )
            .unwrap(),
            Some(conf)
        );
        assert_eq!(
            Confinement::from_fields(false, Some("none"), None),
            Ok(None)
        );
        assert!(Confinement::from_fields(true, Some("some"), None).is_err());
        assert!(Confinement::from_fields(true, None, Some("--privileged")).is_err());
        assert!(Confinement::from_fields(true, None, Some("a b")).is_err());
        assert_eq!(
            Confinement::from_fields(true, None, None).unwrap(),
            Some(Confinement::default())
        );
    }

    #[test]
    fn the_stricter_network_wins() {
        let open = Confinement::default();
        let closed = Confinement {
            network: Network::None,
            image: None,
        };
        assert_eq!(open.strictest(&closed).network, Network::None);
        assert_eq!(closed.strictest(&open).network, Network::None);
        assert!(
            open.reach()
                .contains("the internet but not this machine's loopback")
        );
        assert!(closed.reach().contains("no network"));
        let host = Confinement {
            network: Network::Host,
            image: None,
        };
        assert_eq!(host.strictest(&open).network, Network::Internet);
        assert_eq!(open.strictest(&host).network, Network::Internet);
        assert_eq!(
            Confinement::from_fields(true, Some("open"), None)
                .unwrap()
                .unwrap()
                .network,
            Network::Internet,
            "the old name of the default"
        );
        assert_eq!(host.fields()[1], ("sandbox_network", "host".to_owned()));
    }
}
