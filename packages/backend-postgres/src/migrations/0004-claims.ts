/**
 * Migration 4: claims that outlive no process (`claimed_until`, `claim_owner`: a delivery marks the rows
 * it takes in a short statement of its own and settles them in its transaction; a claim left by a process
 * that died lapses) and the `recurring` flag (the stored state is a recurrence, not a one-shot schedule's
 * operator state), for listings. Existing rows are unclaimed; those with a stored state were recurrences.
 */
export default {
  id: 4,
  name: 'claims',
  sql: `
ALTER TABLE :SCHEMA.schedules
  ADD COLUMN recurring boolean NOT NULL DEFAULT false,
  ADD COLUMN claimed_until timestamptz,
  ADD COLUMN claim_owner text;
UPDATE :SCHEMA.schedules SET recurring = true WHERE recurrence IS NOT NULL;
`,
};
