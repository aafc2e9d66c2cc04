/**
 * Migration 5: SQL functions that schedule and cancel from SQL, in whatever transaction calls them (a
 * trigger, a stored procedure, a psql session, a service in another language): `schedule(key, at,
 * message)`, `cancel_schedule(key)`, `cancel_schedule_prefix(prefix)`. They follow the TypeScript API's
 * rules: keys and messages are validated (an error with SQLSTATE 22023 whose message starts with
 * `DUETIME_INVALID_ARGUMENT` and names the field; nothing is written), versions come from the same
 * sequence, a replaced schedule gets a fresh unclaimed version, and `schedule` sends the change
 * notification inside the caller's transaction (delivered when it commits). `:SCHEMA` is replaced by the
 * quoted schema name, `:CHANNEL` by the notification channel as a string literal.
 */
export default {
  id: 5,
  name: 'sql-functions',
  sql: `
CREATE FUNCTION :SCHEMA.invalid_argument(field text, value text, reason text) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
BEGIN
  RAISE EXCEPTION USING
    ERRCODE = '22023',
    MESSAGE = format('DUETIME_INVALID_ARGUMENT: invalid %s %s: %s', field, coalesce(to_json(value)::text, 'null'), reason),
    DETAIL = format('field: %s', field),
    HINT = 'duetime refused the argument; nothing was written';
END
$fn$;
COMMENT ON FUNCTION :SCHEMA.invalid_argument(text, text, text) IS 'duetime: raises the typed refusal of an argument';

CREATE FUNCTION :SCHEMA.check_text(field text, value text, what text, allow_empty boolean) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $fn$
DECLARE
  -- Lengths as JavaScript counts them (UTF-16 code units): characters beyond U+FFFF count twice.
  units integer;
BEGIN
  IF value IS NULL THEN
    PERFORM :SCHEMA.invalid_argument(field, value, what || ' must be a string');
  END IF;
  IF NOT allow_empty AND value = '' THEN
    PERFORM :SCHEMA.invalid_argument(field, value, what || ' must not be empty');
  END IF;
  units := char_length(value) + (SELECT count(*)::int FROM regexp_matches(value, '[\\U00010000-\\U0010FFFF]', 'g'));
  IF units > 512 THEN
    PERFORM :SCHEMA.invalid_argument(field, value, what || ' is longer than 512 characters');
  END IF;
  IF value ~ '[\\u0001-\\u001f\\u007f-\\u009f]' THEN
    PERFORM :SCHEMA.invalid_argument(field, value, what || ' contains a control character');
  END IF;
END
$fn$;
COMMENT ON FUNCTION :SCHEMA.check_text(text, text, text, boolean) IS 'duetime: the rules of keys, prefixes and identifiers';

CREATE FUNCTION :SCHEMA.schedule(key text, at timestamptz, message json) RETURNS bigint
LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
DECLARE
  m jsonb;
  stored jsonb;
  v bigint;
BEGIN
  PERFORM :SCHEMA.check_text('key', key, 'a schedule key', false);
  IF at IS NULL OR NOT isfinite(at) THEN
    PERFORM :SCHEMA.invalid_argument('at', at::text, 'must be a finite timestamp');
  END IF;
  IF message IS NULL OR json_typeof(message) <> 'object' THEN
    PERFORM :SCHEMA.invalid_argument('message', message::text, 'must be an object { type, aggregateId?, data? }');
  END IF;
  m := message::jsonb;
  IF jsonb_typeof(m -> 'type') IS DISTINCT FROM 'string' THEN
    PERFORM :SCHEMA.invalid_argument('message.type', (m -> 'type')::text, 'an identifier must be a string');
  END IF;
  PERFORM :SCHEMA.check_text('message.type', m ->> 'type', 'an identifier', false);
  stored := jsonb_build_object('type', m -> 'type');
  IF m ? 'aggregateId' THEN
    IF jsonb_typeof(m -> 'aggregateId') <> 'string' THEN
      PERFORM :SCHEMA.invalid_argument('message.aggregateId', (m -> 'aggregateId')::text, 'an identifier must be a string');
    END IF;
    PERFORM :SCHEMA.check_text('message.aggregateId', m ->> 'aggregateId', 'an identifier', false);
    stored := stored || jsonb_build_object('aggregateId', m -> 'aggregateId');
  END IF;
  IF m ? 'data' THEN
    stored := stored || jsonb_build_object('data', m -> 'data');
  END IF;
  IF octet_length(stored::text) > 262144 THEN
    PERFORM :SCHEMA.invalid_argument('message', octet_length(stored::text) || ' bytes', 'serialises to more than 262144 bytes');
  END IF;
  INSERT INTO :SCHEMA.schedules AS t (key, at, due_at, version, attempts, message, recurrence, recurring)
  VALUES (key, at, at, nextval(':SCHEMA.schedule_versions'), 0, stored::json, NULL, false)
  ON CONFLICT ON CONSTRAINT schedules_pkey DO UPDATE SET
    at = EXCLUDED.at,
    due_at = EXCLUDED.due_at,
    version = CASE WHEN EXCLUDED.version > t.version THEN EXCLUDED.version
                   ELSE nextval(':SCHEMA.schedule_versions') END,
    attempts = 0,
    message = EXCLUDED.message,
    last_error = NULL,
    recurrence = NULL,
    recurring = false,
    claimed_until = NULL,
    claim_owner = NULL
  RETURNING t.version INTO v;
  PERFORM pg_notify(:CHANNEL, 'sql:' || floor(extract(epoch FROM at) * 1000)::bigint);
  RETURN v;
END
$fn$;
COMMENT ON FUNCTION :SCHEMA.schedule(text, timestamptz, json) IS 'duetime: schedules message under key at at, in the calling transaction; returns the version';

CREATE FUNCTION :SCHEMA.cancel_schedule(key text) RETURNS boolean
LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
DECLARE
  n integer;
BEGIN
  PERFORM :SCHEMA.check_text('key', key, 'a schedule key', false);
  DELETE FROM :SCHEMA.schedules s WHERE s.key = key;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n > 0;
END
$fn$;
COMMENT ON FUNCTION :SCHEMA.cancel_schedule(text) IS 'duetime: cancels the schedule under key, in the calling transaction';

CREATE FUNCTION :SCHEMA.cancel_schedule_prefix(prefix text) RETURNS integer
LANGUAGE plpgsql AS $fn$
#variable_conflict use_variable
DECLARE
  n integer;
BEGIN
  PERFORM :SCHEMA.check_text('prefix', prefix, 'a key prefix', true);
  -- Literal: no pattern characters; the range keeps it on the primary key's index.
  DELETE FROM :SCHEMA.schedules s WHERE s.key >= prefix AND starts_with(s.key, prefix);
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION :SCHEMA.cancel_schedule_prefix(text) IS 'duetime: cancels every schedule whose key starts with prefix (literally)';
`,
};
