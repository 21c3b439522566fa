//! The project templates `ralph init` writes, embedded in the binary so that
//! init works wherever the binary is, without the plugin folder.

pub(crate) struct Template {
    pub name: &'static str,
    pub summary: &'static str,
    /// `(file name, contents)`, written under the project's `ralph/` folder.
    pub files: [(&'static str, &'static str); 3],
}

pub(crate) const TEMPLATES: &[Template] = &[
    Template {
        name: "software",
        summary: "a software project: user stories with acceptance criteria, checks, one commit per story",
        files: [
            ("PROMPT.md", include_str!("../templates/software/PROMPT.md")),
            ("prd.json", include_str!("../templates/software/prd.json")),
            (
                "progress.txt",
                include_str!("../templates/software/progress.txt"),
            ),
        ],
    },
    Template {
        name: "marketing",
        summary: "a content-marketing pipeline: 12 stories from set-up to metrics",
        files: [
            (
                "PROMPT.md",
                include_str!("../templates/marketing/PROMPT.md"),
            ),
            ("prd.json", include_str!("../templates/marketing/prd.json")),
            (
                "progress.txt",
                include_str!("../templates/marketing/progress.txt"),
            ),
        ],
    },
];

pub(crate) fn find(name: &str) -> Option<&'static Template> {
    TEMPLATES.iter().find(|t| t.name == name)
}

/// The template whose example stories `stories` are, unchanged (a PRD
/// `ralph init` wrote and nobody edited; its layout may differ).
pub(crate) fn unedited(
    stories: &[ralph_state::fields::stories::Story],
) -> Option<&'static Template> {
    TEMPLATES.iter().find(|t| {
        ralph_state::fields::stories::parse("prd.json", t.files[1].1).is_ok_and(|s| s == stories)
    })
}

/// The template whose stories are an example only, never work to do.
pub(crate) const EXAMPLE_ONLY: &str = "software";

#[cfg(test)]
mod tests {

    #[test]
    fn the_templates_pass() {
        for t in crate::templates::TEMPLATES {
            assert_eq!(
                ralph_state::fields::prd_lint::lint("prd.json", t.files[1].1),
                [],
                "{}",
                t.name
            );
        }
    }
    use super::*;

    #[test]
    fn an_unedited_prd_is_known_and_an_edited_one_is_not() {
        use ralph_state::fields::stories::parse;
        for t in TEMPLATES {
            let mut stories = parse("prd.json", t.files[1].1).unwrap();
            assert_eq!(unedited(&stories).map(|u| u.name), Some(t.name));
            stories[0].title.push_str(" for real");
            assert!(unedited(&stories).is_none(), "{}", t.name);
        }
    }

    #[test]
    fn templates_are_complete_and_valid() {
        for t in TEMPLATES {
            let prd: serde_json::Value = serde_json::from_str(t.files[1].1).unwrap();
            let stories = prd["userStories"].as_array().unwrap();
            assert!(!stories.is_empty(), "{}", t.name);
            for s in stories {
                for key in [
                    "id",
                    "title",
                    "description",
                    "acceptanceCriteria",
                    "priority",
                    "passes",
                    "notes",
                ] {
                    assert!(s.get(key).is_some(), "{} story lacks {key}", t.name);
                }
            }
            assert!(t.files[0].1.contains("<promise>"), "{}", t.name);
        }
        assert_eq!(
            find("marketing").map(|t| serde_json::from_str::<serde_json::Value>(t.files[1].1)
                .unwrap()["userStories"]
                .as_array()
                .unwrap()
                .len()),
            Some(12)
        );
    }
}
