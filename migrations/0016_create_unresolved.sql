-- A CREATING job whose lost create cannot be resolved within its search's
-- bound says so (issue 51): why, in the worker's words, and since when,
-- until the search ends (the batch found, or proven never made). Operators
-- see it on the job and in `tally_jobs_create_unresolved`.

ALTER TABLE jobs ADD COLUMN create_unresolved text;
ALTER TABLE jobs ADD COLUMN create_unresolved_time timestamptz;
