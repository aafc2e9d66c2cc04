import { DuetimeError, InvalidArgumentError } from '../../errors.js';
import { Declaration, type DeclarationDescription } from './declarations.js';

/** Two declarations in one registry share an id. `code` is `DUETIME_DUPLICATE_ID`. */
export class DuplicateIdError extends DuetimeError {
  readonly field: string;
  readonly value: string;

  constructor(field: string, id: string) {
    super(
      'DUETIME_DUPLICATE_ID',
      `duplicate schedule id ${JSON.stringify(id)} (${field}): ids must be unique in a registry`,
    );
    this.field = field;
    this.value = id;
  }
}

/**
 * Marks registries, so that a registry made by another copy of `@duetime/core` (a globally installed CLI
 * loading an application's module, two versions in one `node_modules`) is still recognised: `instanceof`
 * only knows its own copy's class. `Symbol.for` gives every copy the same symbol.
 */
const REGISTRY_BRAND: unique symbol = Symbol.for('duetime.registry') as never;

/**
 * Whether `value` is a {@link Registry}, from this copy of `@duetime/core` or another one.
 */
export function isRegistry(value: unknown): value is Registry {
  return (
    typeof value === 'object' &&
    value !== null &&
    (value as { [REGISTRY_BRAND]?: unknown })[REGISTRY_BRAND] === true
  );
}

/**
 * The declarations a service runs, by id. Every replica of a service builds the same registry; the
 * scheduler's leader runs it. Immutable; `with(...)` gives a larger one.
 */
export class Registry implements Iterable<Declaration> {
  readonly #byId: ReadonlyMap<string, Declaration>;

  /**
   * @throws {DuplicateIdError} when two declarations share an id.
   * @throws {InvalidArgumentError} for anything that is not a declaration.
   */
  constructor(...declarations: Declaration[]) {
    const byId = new Map<string, Declaration>();
    declarations.forEach((declaration, i) => {
      if (!(declaration instanceof Declaration))
        throw new InvalidArgumentError(
          `declarations[${i}]`,
          declaration,
          'must be a declaration from calendar(), cron(), every() or define()',
        );
      if (byId.has(declaration.id)) throw new DuplicateIdError(`declarations[${i}].id`, declaration.id);
      byId.set(declaration.id, declaration);
    });
    this.#byId = byId;
    Object.freeze(this);
  }

  /** A registry with these declarations added. */
  with(...declarations: Declaration[]): Registry {
    return new Registry(...this.#byId.values(), ...declarations);
  }

  get(id: string): Declaration | undefined {
    return this.#byId.get(id);
  }

  has(id: string): boolean {
    return this.#byId.has(id);
  }

  get size(): number {
    return this.#byId.size;
  }

  ids(): string[] {
    return [...this.#byId.keys()];
  }

  /** The brand {@link isRegistry} looks for. */
  get [REGISTRY_BRAND](): true {
    return true;
  }

  [Symbol.iterator](): Iterator<Declaration> {
    return this.#byId.values();
  }

  /** JSON-safe descriptions of every declaration, in declaration order. */
  describe(): DeclarationDescription[] {
    return [...this.#byId.values()].map((d) => d.describe());
  }
}
