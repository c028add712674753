-- Files workers uploaded to a provider for rows' media (issue 31): one per
-- provider account and SHA-256 of the bytes, reused by later attempts and
-- other rows while it lives at the provider, and deleted by a janitor when
-- no open job needs it.
CREATE TABLE media_uploads (
    provider_account text        NOT NULL,
    sha256           text        NOT NULL,
    -- The provider's name (`files/abc`) and the URI a request references.
    file             text        NOT NULL,
    uri              text        NOT NULL,
    mime_type        text        NOT NULL,
    size_bytes       int8        NOT NULL CHECK (size_bytes >= 0),
    -- When the provider deletes it (Gemini: 48 hours after the upload).
    expire_time      timestamptz NOT NULL,
    create_time      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider_account, sha256)
);

-- Which uploads a job's batch references (recorded at MarkCreating): an
-- upload an open job references is never deleted.
CREATE TABLE job_media (
    job_id           int8 NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    provider_account text NOT NULL,
    sha256           text NOT NULL,
    PRIMARY KEY (job_id, sha256)
);
CREATE INDEX job_media_upload ON job_media (provider_account, sha256);
