-- Provider accounts seen through the caller's team (issue 51). The account a
-- worker names (a hash of its key and base URL) is only a claim: another
-- team sharing the provider key sees the same name in its own jobs. So the
-- media uploads register and the cool-downs are kept per team (the calling
-- principal, as `jobs.team`), and one team can neither read, use, overwrite
-- nor forget another's uploads, nor cool down another's models.
--
-- Uploads recorded before this had no team: their entries are dropped (no
-- caller could reach them); they are uploaded again when next needed, and
-- the files expire at the provider (Gemini: 48 hours). Links of open jobs
-- take their job's team.


ALTER TABLE media_uploads ADD COLUMN team text NOT NULL DEFAULT '';
ALTER TABLE media_uploads DROP CONSTRAINT media_uploads_pkey;
ALTER TABLE media_uploads ADD PRIMARY KEY (team, provider_account, sha256);

ALTER TABLE job_media ADD COLUMN team text NOT NULL DEFAULT '';
UPDATE job_media m SET team = j.team FROM jobs j WHERE j.id = m.job_id;
DELETE FROM media_uploads WHERE team = '';
DROP INDEX job_media_upload;
CREATE INDEX job_media_upload ON job_media (team, provider_account, sha256);

ALTER TABLE model_cooldowns ADD COLUMN team text NOT NULL DEFAULT '';
ALTER TABLE model_cooldowns DROP CONSTRAINT model_cooldowns_pkey;
ALTER TABLE model_cooldowns ADD PRIMARY KEY (team, account, model, lane);
