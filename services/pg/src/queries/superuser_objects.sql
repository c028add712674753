-- Objects of the application database still owned by the superuser, as rows of
-- (kind, name) for `ALTER <kind> <name> OWNER TO <app role>`. They are left by clusters
-- made before tally had its own role, whose migrations ran as the superuser.
--
-- $1: the superuser's name.
--
-- Names come out of quote_ident and the reg* casts, so they are quoted and resolvable as
-- written. Tables carry their indexes, row types and owned sequences (serial, identity)
-- along, so those are not listed; extension members belong to their extension. Rows
-- come in dependency-friendly order: schemas, relations, routines, types, statistics.
WITH su AS (
    SELECT oid FROM pg_roles WHERE rolname = $1
), ns AS (
    SELECT oid, nspname FROM pg_namespace
    WHERE nspname NOT IN ('pg_catalog', 'information_schema')
      AND nspname NOT LIKE 'pg\_toast%'
      AND nspname NOT LIKE 'pg\_temp\_%'
), ext AS (
    SELECT classid, objid FROM pg_depend WHERE deptype = 'e'
)
SELECT kind, name FROM (
    SELECT 1 AS ord, 'SCHEMA' AS kind, quote_ident(ns.nspname) AS name
    FROM ns JOIN pg_namespace n ON n.oid = ns.oid
    WHERE n.nspowner = (SELECT oid FROM su) AND ns.nspname <> 'public'
      AND NOT EXISTS (SELECT 1 FROM ext
                      WHERE ext.classid = 'pg_namespace'::regclass AND ext.objid = n.oid)
    UNION ALL
    SELECT 2,
           CASE c.relkind
               WHEN 'v' THEN 'VIEW'
               WHEN 'm' THEN 'MATERIALIZED VIEW'
               WHEN 'f' THEN 'FOREIGN TABLE'
               WHEN 'S' THEN 'SEQUENCE'
               WHEN 'c' THEN 'TYPE'
               ELSE 'TABLE'
           END,
           c.oid::regclass::text
    FROM pg_class c JOIN ns ON ns.oid = c.relnamespace
    WHERE c.relowner = (SELECT oid FROM su)
      AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'c', 'S')
      AND NOT (c.relkind = 'S' AND EXISTS (
          SELECT 1 FROM pg_depend d
          WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
            AND d.deptype IN ('a', 'i')))
      AND NOT EXISTS (SELECT 1 FROM ext
                      WHERE ext.classid = 'pg_class'::regclass AND ext.objid = c.oid)
    UNION ALL
    SELECT 3, CASE p.prokind WHEN 'a' THEN 'AGGREGATE' ELSE 'ROUTINE' END,
           p.oid::regprocedure::text
    FROM pg_proc p JOIN ns ON ns.oid = p.pronamespace
    WHERE p.proowner = (SELECT oid FROM su)
      AND NOT EXISTS (SELECT 1 FROM ext
                      WHERE ext.classid = 'pg_proc'::regclass AND ext.objid = p.oid)
    UNION ALL
    SELECT 4, CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END, t.oid::regtype::text
    FROM pg_type t JOIN ns ON ns.oid = t.typnamespace
    WHERE t.typowner = (SELECT oid FROM su) AND t.typtype IN ('e', 'd', 'r')
      AND NOT EXISTS (SELECT 1 FROM ext
                      WHERE ext.classid = 'pg_type'::regclass AND ext.objid = t.oid)
    UNION ALL
    SELECT 5, 'STATISTICS', quote_ident(ns.nspname) || '.' || quote_ident(s.stxname)
    FROM pg_statistic_ext s JOIN ns ON ns.oid = s.stxnamespace
    WHERE s.stxowner = (SELECT oid FROM su)
) objects
ORDER BY ord, name
