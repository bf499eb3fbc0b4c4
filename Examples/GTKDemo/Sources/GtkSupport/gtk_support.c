#include "gtk_support.h"

#include <glib-unix.h>
#include <stdint.h>
#include <unistd.h>

// MARK: - EsRow

struct _EsRow {
    GObject parent_instance;
    gboolean header;
    char *text;
};

G_DEFINE_FINAL_TYPE(EsRow, es_row, G_TYPE_OBJECT)

enum { ROW_PROP_TEXT = 1, ROW_N_PROPS };
static GParamSpec *row_props[ROW_N_PROPS];

static void es_row_finalize(GObject *object) {
    g_free(ES_ROW(object)->text);
    G_OBJECT_CLASS(es_row_parent_class)->finalize(object);
}

static void es_row_get_property(GObject *object, guint id, GValue *value, GParamSpec *spec) {
    if (id == ROW_PROP_TEXT) g_value_set_string(value, ES_ROW(object)->text);
    else G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec);
}

static void es_row_class_init(EsRowClass *klass) {
    GObjectClass *object_class = G_OBJECT_CLASS(klass);
    object_class->finalize = es_row_finalize;
    object_class->get_property = es_row_get_property;
    row_props[ROW_PROP_TEXT] = g_param_spec_string("text", NULL, NULL, "", G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
    g_object_class_install_properties(object_class, ROW_N_PROPS, row_props);
}

static void es_row_init(EsRow *row) { row->text = g_strdup(""); }

EsRow *es_row_new(gboolean header, const char *text) {
    EsRow *row = g_object_new(ES_TYPE_ROW, NULL);
    row->header = header;
    g_free(row->text);
    row->text = g_strdup(text);
    return row;
}

gboolean es_row_is_header(EsRow *row) { return row->header; }
const char *es_row_get_text(EsRow *row) { return row->text; }

void es_row_set_text(EsRow *row, const char *text) {
    if (g_strcmp0(row->text, text) == 0) return;
    g_free(row->text);
    row->text = g_strdup(text);
    g_object_notify_by_pspec(G_OBJECT(row), row_props[ROW_PROP_TEXT]);
}

// MARK: - EsFlatModel

struct _EsFlatModel {
    GObject parent_instance;
    EsCountFunc count;
    EsItemFunc item;
    void *context;
};

static GType es_flat_model_get_item_type(GListModel *model) { return ES_TYPE_ROW; }

static guint es_flat_model_get_n_items(GListModel *model) {
    EsFlatModel *self = ES_FLAT_MODEL(model);
    return self->count(self->context);
}

static gpointer es_flat_model_get_item(GListModel *model, guint position) {
    EsFlatModel *self = ES_FLAT_MODEL(model);
    if (position >= self->count(self->context)) return NULL;
    return self->item(self->context, position);
}

static void es_flat_model_list_model_init(GListModelInterface *iface) {
    iface->get_item_type = es_flat_model_get_item_type;
    iface->get_n_items = es_flat_model_get_n_items;
    iface->get_item = es_flat_model_get_item;
}

G_DEFINE_FINAL_TYPE_WITH_CODE(
    EsFlatModel, es_flat_model, G_TYPE_OBJECT,
    G_IMPLEMENT_INTERFACE(G_TYPE_LIST_MODEL, es_flat_model_list_model_init))

enum { MODEL_PROP_ITEM_TYPE = 1, MODEL_PROP_N_ITEMS, MODEL_N_PROPS };
static GParamSpec *model_props[MODEL_N_PROPS];

static void es_flat_model_get_property(GObject *object, guint id, GValue *value, GParamSpec *spec) {
    switch (id) {
    case MODEL_PROP_ITEM_TYPE: g_value_set_gtype(value, ES_TYPE_ROW); break;
    case MODEL_PROP_N_ITEMS: g_value_set_uint(value, es_flat_model_get_n_items(G_LIST_MODEL(object))); break;
    default: G_OBJECT_WARN_INVALID_PROPERTY_ID(object, id, spec);
    }
}

static void es_flat_model_class_init(EsFlatModelClass *klass) {
    GObjectClass *object_class = G_OBJECT_CLASS(klass);
    object_class->get_property = es_flat_model_get_property;
    model_props[MODEL_PROP_ITEM_TYPE] =
        g_param_spec_gtype("item-type", NULL, NULL, G_TYPE_OBJECT, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
    model_props[MODEL_PROP_N_ITEMS] =
        g_param_spec_uint("n-items", NULL, NULL, 0, G_MAXUINT, 0, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS);
    g_object_class_install_properties(object_class, MODEL_N_PROPS, model_props);
}

static void es_flat_model_init(EsFlatModel *model) {}

EsFlatModel *es_flat_model_new(EsCountFunc count, EsItemFunc item, void *context) {
    EsFlatModel *model = g_object_new(ES_TYPE_FLAT_MODEL, NULL);
    model->count = count;
    model->item = item;
    model->context = context;
    return model;
}

void es_flat_model_items_changed(EsFlatModel *model, guint position, guint removed, guint added) {
    g_list_model_items_changed(G_LIST_MODEL(model), position, removed, added);
    if (removed != added) g_object_notify_by_pspec(G_OBJECT(model), model_props[MODEL_PROP_N_ITEMS]);
}

// MARK: - The row factory, and the rows shown

static GHashTable *shown_items;  // GtkListItem* bound to a row now

static void factory_setup(GtkSignalListItemFactory *factory, GtkListItem *item, gpointer data) {
    GtkWidget *label = gtk_label_new("");
    gtk_label_set_xalign(GTK_LABEL(label), 0);
    gtk_widget_set_margin_start(label, 8);
    gtk_list_item_set_child(item, label);
}

static void factory_bind(GtkSignalListItemFactory *factory, GtkListItem *item, gpointer data) {
    EsRow *row = ES_ROW(gtk_list_item_get_item(item));
    GtkWidget *label = gtk_list_item_get_child(item);
    GBinding *binding = g_object_bind_property(row, "text", label, "label", G_BINDING_SYNC_CREATE);
    g_object_set_data(G_OBJECT(item), "es-binding", binding);
    if (row->header) {
        gtk_widget_add_css_class(label, "heading");
        gtk_widget_set_margin_top(label, 6);
    }
    gtk_list_item_set_selectable(item, !row->header);
    if (!shown_items) shown_items = g_hash_table_new(NULL, NULL);
    g_hash_table_add(shown_items, item);
}

static void factory_unbind(GtkSignalListItemFactory *factory, GtkListItem *item, gpointer data) {
    GBinding *binding = g_object_get_data(G_OBJECT(item), "es-binding");
    if (binding) g_binding_unbind(binding);
    g_object_set_data(G_OBJECT(item), "es-binding", NULL);
    GtkWidget *label = gtk_list_item_get_child(item);
    gtk_widget_remove_css_class(label, "heading");
    gtk_widget_set_margin_top(label, 0);
    if (shown_items) g_hash_table_remove(shown_items, item);
}

GtkListItemFactory *es_row_factory_new(void) {
    GtkListItemFactory *factory = gtk_signal_list_item_factory_new();
    g_signal_connect(factory, "setup", G_CALLBACK(factory_setup), NULL);
    g_signal_connect(factory, "bind", G_CALLBACK(factory_bind), NULL);
    g_signal_connect(factory, "unbind", G_CALLBACK(factory_unbind), NULL);
    return factory;
}

void es_visit_shown_rows(EsShownRowFunc visit, void *context) {
    if (!shown_items) return;
    GHashTableIter iter;
    gpointer key;
    g_hash_table_iter_init(&iter, shown_items);
    while (g_hash_table_iter_next(&iter, &key, NULL)) {
        GtkListItem *item = key;
        GtkWidget *label = gtk_list_item_get_child(item);
        visit(context, gtk_list_item_get_position(item), gtk_label_get_text(GTK_LABEL(label)),
              gtk_widget_has_css_class(label, "heading"));
    }
}

guint es_shown_row_count(void) { return shown_items ? g_hash_table_size(shown_items) : 0; }

// MARK: - The main dispatch queue in GLib's main loop

// libdispatch's hooks for a run loop that is not CoreFoundation's (exported by libdispatch on Linux: the main
// queue's eventfd, and the call that runs its blocks).
extern int _dispatch_get_main_queue_handle_4CF(void);
extern void _dispatch_main_queue_callback_4CF(void *message);

static gboolean run_main_queue(gint fd, GIOCondition condition, gpointer data) {
    uint64_t wakes;
    // The eventfd is level-triggered for GLib: read it (nonblocking; empty is fine) before running the blocks,
    // so that a block queued while they run wakes the loop again.
    if (read(fd, &wakes, sizeof wakes) < 0) { /* EAGAIN: another reader emptied it; the blocks still run */ }
    _dispatch_main_queue_callback_4CF(NULL);
    return G_SOURCE_CONTINUE;
}

void es_attach_main_queue(void) {
    g_unix_fd_add(_dispatch_get_main_queue_handle_4CF(), G_IO_IN, run_main_queue, NULL);
}

gulong es_connect(gpointer instance, const char *signal, GCallback handler, gpointer user_data) {
    return g_signal_connect_data(instance, signal, handler, user_data, NULL, 0);
}

void es_click(GtkWidget *button) { g_signal_emit_by_name(button, "clicked"); }
