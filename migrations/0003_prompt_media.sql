-- Media variables of a prompt (issue 31): template variables whose values
-- are references to files (images, documents) sent after the prompt's text.
ALTER TABLE prompts ADD COLUMN media text[] NOT NULL DEFAULT '{}';
