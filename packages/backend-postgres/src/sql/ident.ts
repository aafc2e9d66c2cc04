/** Quotes an SQL identifier (`my"schema` → `"my""schema"`). */
export function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}
