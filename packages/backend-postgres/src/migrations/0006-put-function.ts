/**
 * Migration 6: `put_schedules(keys, ats, due_ats, messages, states, recurring)`, the put of schedules with
 * distinct keys as a function, for transactions duetime joins (`store.join`). Those run their statements
 * through the application's library, which cannot use duetime's prepared statements: planning the put
 * anew on every join costs more than the rest of it. PL/pgSQL keeps the plan of a function's statements
 * for the session, so a join sends a call that is cheap to plan. The statement is the `put` of
 * sql/schedules.ts as of this migration (a migration never changes once released; a later change of the
 * put needs a migration that replaces the function).
 */
export default {
  id: 6,
  name: 'put-function',
  sql: `
CREATE FUNCTION :SCHEMA.put_schedules(
  p_keys text[], p_ats timestamptz[], p_due_ats timestamptz[], p_messages text[], p_states text[], p_recurring bool[]
) RETURNS integer
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  n integer;
BEGIN
  INSERT INTO :SCHEMA.schedules AS t (key, at, due_at, version, attempts, message, recurrence, recurring)
  SELECT p.key, p.at, p.due_at, nextval(':SCHEMA.schedule_versions'), 0, p.message::json, p.recurrence::json,
    p.recurring
  FROM unnest(p_keys, p_ats, p_due_ats, p_messages, p_states, p_recurring)
    AS p(key, at, due_at, message, recurrence, recurring)
  ON CONFLICT (key) DO UPDATE SET
    at = EXCLUDED.at,
    due_at = EXCLUDED.due_at,
    version = CASE WHEN EXCLUDED.version > t.version THEN EXCLUDED.version
                   ELSE nextval(':SCHEMA.schedule_versions') END,
    attempts = 0,
    message = EXCLUDED.message,
    last_error = NULL,
    recurrence = EXCLUDED.recurrence,
    recurring = EXCLUDED.recurring,
    claimed_until = NULL,
    claim_owner = NULL;
  GET DIAGNOSTICS n = ROW_COUNT;
  RETURN n;
END
$fn$;
COMMENT ON FUNCTION :SCHEMA.put_schedules(text[], timestamptz[], timestamptz[], text[], text[], bool[]) IS
  'duetime: the put of schedules with distinct keys, for joined transactions (a plan kept per session); returns the rows put';
`,
};
