export interface EmbeddedScript {
  source: string;
  sha: string;
  readOnly: boolean;
}
export function buildScripts(dir?: string): Record<string, EmbeddedScript>;
export function renderModule(scripts: Record<string, EmbeddedScript>): string;
