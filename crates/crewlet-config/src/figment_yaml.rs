//! YAML for figment, read by serde-saphyr (figment's own `Yaml` format uses
//! serde_yaml, which this project does not use).

use figment::providers::Format;
use serde::de::DeserializeOwned;

/// A figment [`Format`] reading YAML with serde-saphyr:
/// `Figment::new().merge(SaphyrYaml::file_exact("config.yaml"))`.
pub struct SaphyrYaml;

impl Format for SaphyrYaml {
    type Error = serde_saphyr::Error;

    const NAME: &'static str = "YAML";

    fn from_str<T: DeserializeOwned>(string: &str) -> Result<T, Self::Error> {
        serde_saphyr::from_str(string)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::Figment;

    #[derive(Debug, serde::Deserialize, PartialEq)]
    struct Small {
        port: u16,
        name: String,
    }

    #[test]
    fn reads_yaml_into_figment() {
        let small: Result<Small, _> =
            Figment::from(SaphyrYaml::string("port: 8000\nname: x\n")).extract();
        assert_eq!(
            small.ok(),
            Some(Small {
                port: 8000,
                name: "x".into()
            })
        );
    }
}
