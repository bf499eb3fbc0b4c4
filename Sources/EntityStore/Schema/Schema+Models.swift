extension Entity {
    /// The entity a model class declares: its `@Stored` attributes and `@ToOne` / `@ToMany` relationships, keyed by
    /// property name unless a key was given, in declaration order. An inverse left out is found by the schema (see
    /// ``Schema/init(version:models:entities:)``).
    public init(model: Model.Type, renamedFrom: String? = nil) {
        // Through the metatype value: a subclass's entity name and properties, whatever the static type.
        self.init(model.entityName, abstract: model.isAbstractEntity, renamedFrom: renamedFrom)
        // The wrappers of the instance `modelProperties` reads keep their initial values (the defaults) only here.
        let declarations = DefaultCapture.capturing {
            model.modelProperties().map { key, property in property.declaration(key: key) }
        }
        // An initial value made anew for each instance is no fixed default: a UUID or a date is made for each object
        // however it is inserted (or migrated); another type's is set by each typed insert.
        let perObject = Set(model.perObjectInitialValues().map(\.key))
        for var declaration in declarations {
            if case .attribute(var attribute) = declaration, perObject.contains(attribute.name) {
                attribute.defaultValue = .null
                attribute.generatedDefault = [.uuid: .uuid, .date: .now][attribute.type]
                declaration = .attribute(attribute)
            }
            switch declaration {
            case .attribute(let attribute) where attribute.isTransient: transientAttributes.append(attribute)
            case .attribute(let attribute): attributes.append(attribute)
            case .relationship(let relationship): relationships.append(relationship)
            }
        }
    }
}

extension Schema {
    /// A schema made from model classes, and declared entities beside them.
    ///
    /// <!-- snippet
    /// uses: library
    /// -->
    /// ```swift
    /// let schema = try Schema(version: 2, models: [Author.self, Book.self, Tag.self])
    /// ```
    ///
    /// A relationship declared without its inverse takes the only relationship of its destination that points back
    /// (not counting itself); when there is none, or several, the schema is refused naming it.
    ///
    /// - Throws: ``EntityStoreError`` with code ``EntityStoreError/Code/invalidSchema`` listing every problem.
    public init(version: Int, models: [Model.Type], @EntityBuilder entities: () -> [Entity] = { [] }) throws {
        var all = models.map { Self.entity(of: $0) }
        // A model class that subclasses another model class of the list is its sub-entity.
        let names = Dictionary(models.map { (ObjectIdentifier($0), $0.entityName) }, uniquingKeysWith: { a, _ in a })
        var parents = Set<ObjectIdentifier>()
        for (i, model) in models.enumerated() {
            if let superclass = model.superclassModel, let name = names[ObjectIdentifier(superclass)] {
                all[i].superentity = name
                parents.insert(ObjectIdentifier(superclass))
            }
        }
        // `isAbstractEntity` is inherited by subclasses: a class no other model subclasses is concrete.
        for (i, model) in models.enumerated() where all[i].isAbstract && !parents.contains(ObjectIdentifier(model)) {
            all[i].isAbstract = model.superclassModel.map { !$0.isAbstractEntity } ?? true
        }
        all += entities()
        var failures: [EntityStoreError.Failure] = []

        for e in all.indices {
            for r in all[e].relationships.indices where all[e].relationships[r].inverse.isEmpty {
                let relationship = all[e].relationships[r]
                let source = all[e].name
                guard let destination = all.first(where: { $0.name == relationship.destination }) else { continue }
                let candidates = destination.relationships.filter { candidate in
                    Schema.isKind(source, of: candidate.destination, in: all)
                        && !(destination.name == source && candidate.name == relationship.name)
                        && (candidate.inverse.isEmpty || candidate.inverse == relationship.name)
                }
                guard candidates.count == 1 else {
                    failures.append(
                        .init(
                            entity: source, key: relationship.name,
                            message: candidates.isEmpty
                                ? "no relationship of \(destination.name) points back to \(source): declare one, or"
                                    + " name the inverse"
                                : "\(candidates.count) relationships of \(destination.name) point back to \(source)"
                                    + " (\(candidates.map(\.name).joined(separator: ", "))): name the inverse"))
                    continue
                }
                all[e].relationships[r].inverse = candidates[0].name
            }
        }
        guard failures.isEmpty else {
            throw EntityStoreError(
                .invalidSchema, failures.count == 1 ? failures[0].description : "\(failures.count) schema problems",
                entity: failures[0].entity, key: failures[0].key, failures: failures)
        }
        try self.init(version: version, entities: all)
        modelClasses = ModelClasses(Dictionary(models.map { ($0.entityName, $0) }, uniquingKeysWith: { a, _ in a }))
    }

    private static func entity(of model: Model.Type) -> Entity { Entity(model: model) }
}

/// Model classes by entity name, carried by a schema made from models (never stored or compared).
struct ModelClasses: @unchecked Sendable {
    // @unchecked Sendable: metatypes are immutable.
    let classes: [String: Model.Type]

    init(_ classes: [String: Model.Type]) { self.classes = classes }
}
