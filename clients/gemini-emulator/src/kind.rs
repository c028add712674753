//! What a batch does.

/// What a batch does: `batchGenerateContent` or `asyncBatchEmbedContent`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchKind {
    Generate,
    Embed,
}

impl BatchKind {
    pub(crate) fn resource_type(self) -> &'static str {
        match self {
            BatchKind::Generate => {
                "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
            }
            BatchKind::Embed => {
                "type.googleapis.com/google.ai.generativelanguage.v1main.EmbedContentBatch"
            }
        }
    }

    pub(crate) fn output_type(self) -> &'static str {
        match self {
            BatchKind::Generate => {
                "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
            }
            BatchKind::Embed => {
                "type.googleapis.com/google.ai.generativelanguage.v1main.EmbedContentBatchOutput"
            }
        }
    }

    /// The output field holding inlined responses.
    pub(crate) fn inlined_field(self) -> &'static str {
        match self {
            BatchKind::Generate => "inlinedResponses",
            BatchKind::Embed => "inlinedEmbedContentResponses",
        }
    }
}
